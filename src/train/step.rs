//! One step of private gradient descent with individual filtering ([FZ21] Algorithm 3):
//! per-example gradients of every active example, the clipping kernel of [`crate::clip`] with
//! its ledger charge, the clipped sum; then noise and the update.
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193

use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

use super::config::ValidConfig;
pub use super::method::{ChargeRule, Selection};
pub use super::update::{ClippedSum, UpdateRule, add_noise, apply_update};
use crate::accounting::filter::{IndividualFilter, LedgerSlot};
use crate::accounting::sampling::DiscreteGaussian;
use crate::clip::{
    BlockStats, DeviceGrid, MAX_CLIPPED_PARAMS, NonFinitePolicy, Rows, RowsAt, SumGrid, axpy, clip_block_with_norms,
};
use crate::data::{Examples, Normalize};
use crate::error::{Error, Result};
use crate::noise::NoiseSampler;
use crate::per_example::{Held, Network, PerExample};

/// How per-example gradients are combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregation {
    /// Algorithm 3's clip to min(‖g‖, C, √remaining), charged to the ledger.
    Clip {
        /// C.
        clip: f64,
        /// Non-finite gradient policy.
        on_nonfinite: NonFinitePolicy,
        /// The grid the clipped rows are rounded onto and summed on exactly
        /// ([`crate::clip::clip_block`], with the norms the engine computed).
        grid: SumGrid,
    },
    /// The plain sum, no clipping, no ledger. NOT PRIVATE.
    UnclippedNonPrivate,
}

impl Aggregation {
    /// How a run of `cfg` combines the per-example gradients of `n` examples: clipped and summed
    /// exactly on the grid of its noise ([`SumGrid::for_noise`]; the discrete sampler's range is
    /// checked before the run starts), or summed unclipped for a non-private run.
    ///
    /// # Errors
    /// [`Error::Config`] naming `privacy.clip` when C·n admits no exact grid, or `privacy.noise`
    /// when σC/γ is outside the discrete sampler's range.
    pub fn for_run(cfg: &ValidConfig, net: &impl PerExample, n: usize) -> Result<Self> {
        let c = cfg.config();
        let (noise, clip) = (c.privacy.noise, c.privacy.clip);
        if !cfg.method().training().is_private() {
            return Ok(Aggregation::UnclippedNonPrivate);
        }
        let grid = SumGrid::for_noise(noise, clip, n, net.num_params()).map_err(|_| {
            Error::config(
                "privacy.clip",
                format!("{clip} times {n} examples has no exact sum grid: use a clip between 1e-100 and 1e100"),
            )
        })?;
        if let (NoiseSampler::DiscreteGaussian, Some(sigma)) = (noise, cfg.sigma()) {
            let gamma = grid.gamma();
            DiscreteGaussian::new(sigma * clip / gamma).map_err(|e| {
                Error::config(
                    "privacy.noise",
                    format!("discrete-gaussian noise of std sigma*C = {} on a grid of {gamma:e}: {e}", sigma * clip),
                )
            })?;
        }
        Ok(Aggregation::Clip { clip, on_nonfinite: c.privacy.on_nonfinite, grid })
    }
}

/// What one block of examples gives the step: its unclipped float sum (empty for a clipped sum,
/// whose integers stay in the worker's grid), its statistics, and its first example with a
/// non-finite gradient under `on_nonfinite = "error"`.
struct BlockResult {
    unclipped: Vec<f32>,
    stats: SumStats,
    failed: Option<usize>,
}

/// Blocks of examples per step (fixed, for a deterministic reduction).
const BLOCKS: usize = 64;

/// What a gradient sum computed (confidential: exact counts and losses on training data).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SumStats {
    /// Examples whose gradient was computed (the active ones).
    pub computed: usize,
    /// Of those, examples with a NaN or infinite gradient, skipped (charged, contributing nothing).
    pub skipped_nonfinite: usize,
    /// Σ of the computed examples' losses (finite ones only).
    pub loss_sum: f64,
}

impl SumStats {
    fn add(&mut self, other: &SumStats) {
        self.computed += other.computed;
        self.skipped_nonfinite += other.skipped_nonfinite;
        self.loss_sum += other.loss_sum;
    }

    /// Counts a micro-batch of computed examples and adds their finite losses.
    fn add_losses(&mut self, losses: &[f32]) {
        self.computed += losses.len();
        self.loss_sum += losses.iter().filter(|l| l.is_finite()).map(|&l| f64::from(l)).sum::<f64>();
    }
}

/// Per-thread buffers for one micro-batch.
struct Scratch<W> {
    ws: W,
    x: Vec<f32>,
    labels: Vec<u8>,
    grads: Vec<f32>,
    losses: Vec<f32>,
    /// Each row's squared norm, from the engine.
    norms: Vec<f64>,
    acc: Vec<f32>,
    grid: Vec<i64>,
    stats: SumStats,
    failed: Option<usize>,
}

impl<W> Scratch<W> {
    /// Buffers for micro-batches of `chunk`; no host rows for an engine that keeps them on its
    /// device in a clipped sum.
    fn new<E: PerExample<Scratch = W>>(net: &E, chunk: usize, clipped: bool) -> Self {
        let rows = if clipped && net.keeps_rows() { 0 } else { chunk * net.num_params() };
        Self {
            ws: net.scratch(chunk),
            x: vec![0.0; chunk * net.input_len()],
            labels: Vec::with_capacity(chunk),
            grads: vec![0.0; rows],
            losses: vec![0.0; chunk],
            norms: vec![0.0; chunk],
            acc: Vec::new(),
            grid: Vec::new(),
            stats: SumStats::default(),
            failed: None,
        }
    }
}

/// What one step computes over: the model, the training examples and how gradients combine;
/// plus one set of scratch buffers per worker thread, reused across steps.
pub struct GradientPlan<'a, E: PerExample = Network> {
    net: E,
    data: Examples<'a>,
    norm: Normalize,
    aggregation: Aggregation,
    chunk: usize,
    /// Scratch buffers, taken by a block for its duration and put back: never locked while a
    /// block computes, so a worker that runs another block nested inside an engine's own
    /// parallel kernel (work stealing) takes another set instead of waiting on its own.
    scratch: Mutex<Vec<Scratch<E::Scratch>>>,
    /// Held for a whole [`gradient_sum`](Self::gradient_sum): the workers' integer sums live in
    /// the scratch buffers for the whole call, so two calls on one plan must not overlap.
    running: Mutex<()>,
}

impl<E: PerExample> std::fmt::Debug for GradientPlan<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradientPlan")
            .field("aggregation", &self.aggregation)
            .field("chunk", &self.chunk)
            .finish_non_exhaustive()
    }
}

impl<'a, E: PerExample> GradientPlan<'a, E> {
    /// A plan over `data` with micro-batches of `chunk ≥ 1` examples; its scratch buffers are
    /// allocated on first use, one per worker thread.
    #[must_use]
    pub fn new(net: E, data: Examples<'a>, norm: Normalize, aggregation: Aggregation, chunk: usize) -> Self {
        Self {
            net,
            data,
            norm,
            aggregation,
            chunk: chunk.max(1),
            scratch: Mutex::new(Vec::new()),
            running: Mutex::new(()),
        }
    }

    /// The per-example engine.
    #[must_use]
    pub fn net(&self) -> &E {
        &self.net
    }

    /// The training examples the plan sums over.
    pub(crate) fn data(&self) -> Examples<'a> {
        self.data
    }

    /// How the examples are normalised.
    pub(crate) fn norm(&self) -> &Normalize {
        &self.norm
    }

    /// How the per-example gradients are combined.
    #[must_use]
    pub fn aggregation(&self) -> Aggregation {
        self.aggregation
    }

    /// The number of training examples the plan sums over.
    #[must_use]
    pub fn examples(&self) -> usize {
        self.data.len()
    }

    /// The engine, giving the plan up.
    #[must_use]
    pub fn into_net(self) -> E {
        self.net
    }

    /// Σᵢ ḡ(xᵢ) over the training examples at θ: per-example gradients in micro-batches
    /// (parallel over fixed blocks on the current rayon pool), combined per the aggregation.
    /// Examples whose budget is spent are skipped (they would contribute zero). The ledger is
    /// charged here, before anything is released.
    ///
    /// # Errors
    /// [`Error::NonFiniteGradient`] naming the first bad example under
    /// [`NonFinitePolicy::Error`] (nothing is released then; charges already made stay made,
    /// which only overstates privacy spent); [`Error::State`] if the ledger does not have one
    /// entry per example.
    pub fn gradient_sum(
        &self,
        theta: &[f32],
        ledger: &mut IndividualFilter,
        step: usize,
    ) -> Result<(ClippedSum, SumStats)> {
        self.gradient_sum_of(theta, ledger, step, Selection::All)
    }

    /// As [`gradient_sum`](Self::gradient_sum), over the examples `selection` sums: all of
    /// them, or a DP-SGD step's Poisson sample. For [`Selection::Sample`] only the included
    /// examples are computed, split into the fixed number of blocks by their own count, so a
    /// step's work and memory follow the sample's size, not n; for
    /// [`Selection::ChargedSample`] every active example is computed and charged.
    ///
    /// # Errors
    /// As [`gradient_sum`](Self::gradient_sum); a sample that is not one flag per example.
    pub fn gradient_sum_of(
        &self,
        theta: &[f32],
        ledger: &mut IndividualFilter,
        step: usize,
        selection: Selection<'_>,
    ) -> Result<(ClippedSum, SumStats)> {
        let n = self.data.len();
        self.check_sum_inputs(theta, ledger.len(), selection.sample())?;
        let _running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        // Fixed blocks summed in a fixed order: the result does not depend on how rayon
        // schedules them, so a fixed noise seed reproduces a run bit for bit.
        let mut slots: Vec<(usize, LedgerSlot<'_>)> = match selection {
            Selection::All | Selection::ChargedSample(..) => ledger.slots_mut(0..n).enumerate().collect(),
            Selection::Sample(m) => ledger.slots_mut(0..n).enumerate().filter(|(i, _)| m[*i]).collect(),
        };
        let block = slots.len().div_ceil(BLOCKS).div_ceil(self.chunk).max(1) * self.chunk;
        let gamma = match self.aggregation {
            Aggregation::Clip { grid, .. } => Some(grid.gamma()),
            Aggregation::UnclippedNonPrivate => None,
        };
        let p = self.net.num_params();
        // The clipped sum is integers: exact in any order, so each set of scratch buffers
        // accumulates the blocks it served and the sets' sums are added at the end (memory per
        // worker, not per block). The unclipped f32 sum and the loss sums are per block, combined
        // in block order, so a fixed seed reproduces them too.
        let grid_len = if gamma.is_some() { p } else { 0 };
        for s in self.scratch.lock().unwrap_or_else(PoisonError::into_inner).iter_mut() {
            s.grid.clear();
            s.grid.resize(grid_len, 0);
        }
        let partials: Vec<BlockResult> = slots
            .par_chunks_mut(block)
            .map(|slots| self.block_sum(theta, slots, selection, (gamma, grid_len)))
            .collect();
        self.combine_blocks(partials, gamma, step)
    }

    /// The checks of [`gradient_sum_of`](Self::gradient_sum_of) before any example is read:
    /// one ledger entry (and sample flag) per example, θ of the model's length, a model the
    /// exact clip covers, and a grid that bounds the sum.
    fn check_sum_inputs(&self, theta: &[f32], ledger_len: usize, sample: Option<&[bool]>) -> Result<()> {
        let n = self.data.len();
        if ledger_len != n || theta.len() != self.net.num_params() || sample.is_some_and(|m| m.len() != n) {
            return Err(Error::State(format!(
                "the ledger has {} entries, θ {} values and the sample {} flags for {n} examples and {} parameters",
                ledger_len,
                theta.len(),
                sample.map_or(n, <[bool]>::len),
                self.net.num_params()
            )));
        }
        if matches!(self.aggregation, Aggregation::Clip { .. }) && self.net.num_params() > MAX_CLIPPED_PARAMS {
            return Err(Error::State(format!(
                "the model has {} parameters; clipping is exact only up to {MAX_CLIPPED_PARAMS}",
                self.net.num_params()
            )));
        }
        // The grid must bound this sum (|each term| < 2⁵¹, the whole sum < 2⁵³ grid units): no
        // grid finer than the fixed-point grid of this clip and n.
        if let Aggregation::Clip { clip, grid, .. } = self.aggregation
            && SumGrid::fixed_point(clip, n).is_ok_and(|finest| grid.gamma() < finest.gamma())
        {
            return Err(Error::State(format!(
                "the sum grid {:e} is finer than the exact grid for clip {clip} and {n} examples",
                grid.gamma()
            )));
        }
        Ok(())
    }

    /// One block of a step's examples (`slots`) on one worker: its active examples, in index
    /// order, in micro-batches of `chunk`, on a set of scratch buffers taken from the pool (and
    /// given back); the integer sum stays in those buffers, the float sum (without a clip) and
    /// the statistics are returned. `gamma`: the grid's unit (`None`: no clip); `grid_len`: the
    /// grid buffers' length.
    fn block_sum(
        &self,
        theta: &[f32],
        slots: &mut [(usize, LedgerSlot<'_>)],
        selection: Selection<'_>,
        (gamma, grid_len): (Option<f64>, usize),
    ) -> BlockResult {
        let p = self.net.num_params();
        let taken = self.scratch.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let mut own = taken.unwrap_or_else(|| {
            let mut fresh = Scratch::new(&self.net, self.chunk, gamma.is_some());
            fresh.grid.resize(grid_len, 0);
            fresh
        });
        let s = &mut own;
        if gamma.is_none() {
            s.acc.clear();
            s.acc.resize(p, 0.0);
        }
        s.stats = SumStats::default();
        s.failed = None;
        // The block's active examples (exhausted ones would contribute zero), in index
        // order, in micro-batches of `chunk`.
        let unclipped = gamma.is_none();
        let mut active: Vec<(usize, &mut LedgerSlot<'_>)> = slots
            .iter_mut()
            .filter(|(_, slot)| unclipped || slot.remaining() > 0.0)
            .map(|(i, slot)| (*i, slot))
            .collect();
        for batch in active.chunks_mut(self.chunk) {
            self.micro_batch(theta, batch, selection, s);
            if s.failed.is_some() {
                break;
            }
        }
        let float_sum = if gamma.is_some() { Vec::new() } else { s.acc.clone() };
        let part = BlockResult { unclipped: float_sum, stats: s.stats, failed: s.failed };
        self.scratch.lock().unwrap_or_else(PoisonError::into_inner).push(own);
        part
    }

    /// The blocks' results in block order: the first failure, or the sum (the workers' integer
    /// grids added, or the float sums in block order) and the statistics.
    fn combine_blocks(
        &self,
        partials: Vec<BlockResult>,
        gamma: Option<f64>,
        step: usize,
    ) -> Result<(ClippedSum, SumStats)> {
        let p = self.net.num_params();
        let mut sum = vec![0.0f32; if gamma.is_none() { p } else { 0 }];
        let mut stats = SumStats::default();
        for BlockResult { unclipped: acc, stats: part, failed } in partials {
            if let Some(example) = failed {
                return Err(Error::NonFiniteGradient { example, step });
            }
            if gamma.is_none() {
                axpy(1.0, &acc, &mut sum);
            }
            stats.add(&part);
        }
        // No overflow: SumGrid bounds every coordinate of the whole sum below 2⁵³ units for the
        // fine grid, and by n·(C/γ + 1) ≪ 2⁶³ for the coarse one.
        let mut grid = vec![0i64; if gamma.is_some() { p } else { 0 }];
        for s in self.scratch.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            grid.iter_mut().zip(&s.grid).for_each(|(a, b)| *a += b);
        }
        let sum = match gamma {
            Some(gamma) => ClippedSum::Grid { values: grid, gamma },
            None => ClippedSum::Float(sum),
        };
        Ok((sum, stats))
    }

    /// One micro-batch: `batch` holds up to `chunk` active examples (index, ledger slot). The
    /// engine always computes exactly `chunk` examples — the rest are zero inputs whose rows
    /// are never read — because its rounding may depend on the batch size (a batch of one is
    /// computed differently): at one size, an example's row depends on nothing but itself and
    /// θ, so a neighbour changes the sum by its own row alone.
    fn micro_batch(
        &self,
        theta: &[f32],
        batch: &mut [(usize, &mut LedgerSlot<'_>)],
        selection: Selection<'_>,
        s: &mut Scratch<E::Scratch>,
    ) {
        let (net, data) = (&self.net, self.data);
        let (px, p, c, b) = (net.input_len(), net.num_params(), self.chunk, batch.len());
        if b == 0 {
            return;
        }
        s.labels.clear();
        for (j, (i, _)) in batch.iter().enumerate() {
            data.normalised_into(*i..*i + 1, &self.norm, &mut s.x[j * px..(j + 1) * px]);
            s.labels.push(data.labels()[*i]);
        }
        s.x[b * px..c * px].fill(0.0);
        s.labels.resize(c, 0);
        let x = &s.x[..c * px];
        // The norms only where the clip charges them.
        let (clip, on_nonfinite, grid) = match self.aggregation {
            Aggregation::UnclippedNonPrivate => {
                net.gradients(theta, x, &s.labels, &mut s.ws, &mut s.grads[..c * p], &mut s.losses);
                for row in s.grads[..b * p].chunks_exact(p) {
                    axpy(1.0, row, &mut s.acc);
                }
                s.stats.add_losses(&s.losses[..b]);
                return;
            }
            Aggregation::Clip { clip, on_nonfinite, grid } => (clip, on_nonfinite, grid),
        };
        // No host rows for an engine that keeps them (`Scratch::new`).
        let grads = if net.keeps_rows() { &mut [][..] } else { &mut s.grads[..c * p] };
        let held = net.gradients_with_norms(theta, x, &s.labels, &mut s.ws, grads, &mut s.losses, &mut s.norms);
        s.stats.add_losses(&s.losses[..b]);
        // Each row is clipped and added right after its backward pass, while in cache (or on
        // the device that computed it).
        let host;
        let rows = match held {
            Held::Host(outer) => {
                host = Rows::with_outer(&s.grads[..c * p], p, outer);
                RowsAt::Host(&host)
            }
            Held::Device(kept) => RowsAt::Device(kept, DeviceGrid::new(grid, clip, c)),
        };
        let mut block = BlockStats::default();
        let clipped = if let Selection::ChargedSample(sample, rule) = selection {
            charged_sample(rows, &s.norms, batch, (sample, rule), (clip, on_nonfinite, grid), &mut s.grid, &mut block)
        } else {
            let mut slots: Vec<&mut LedgerSlot<'_>> = batch.iter_mut().map(|(_, slot)| &mut **slot).collect();
            let which: Vec<usize> = (0..b).collect();
            clip_block_with_norms(rows, &which, &s.norms, &mut slots, clip, on_nonfinite, grid, &mut s.grid, &mut block)
        };
        if let Err(j) = clipped {
            s.failed = Some(batch[j].0);
        }
        s.stats.skipped_nonfinite += block.skipped_nonfinite;
    }
}

/// The canaries' part of a step (a one-run audit, [`crate::train::canaries`]): canary i's
/// gradient is `gradients[i]` on a coordinate of its own (a row of one value). Each active canary
/// that `selection` sums — and, for a method that charges every example, every active one — is
/// charged and clipped by this step's own kernel and rules onto the aggregation's grid, as an
/// example would be. Returns the grid sum, one value per canary.
///
/// # Errors
/// [`Error::State`]: a run without a clip, or a ledger or sample that is not one per canary.
pub(crate) fn canary_sum(
    aggregation: Aggregation,
    ledger: &mut IndividualFilter,
    selection: Selection<'_>,
    gradients: &[f32],
) -> Result<Vec<i64>> {
    let Aggregation::Clip { clip, on_nonfinite, grid } = aggregation else {
        return Err(Error::State("canaries in a run without a clip".into()));
    };
    let m = gradients.len();
    if ledger.len() != m || selection.sample().is_some_and(|s| s.len() != m) {
        return Err(Error::State(format!("a ledger of {} and a sample for {m} canaries", ledger.len())));
    }
    let (mut sum, mut block) = (vec![0i64; m], BlockStats::default());
    let mut slots: Vec<(usize, LedgerSlot<'_>)> = ledger.slots_mut(0..m).enumerate().collect();
    for (i, slot) in &mut slots {
        let (i, slot) = (*i, slot);
        // As in a block: an exhausted canary would add nothing.
        if slot.remaining() <= 0.0 {
            continue;
        }
        let row = [gradients[i]];
        let norm = f64::from(row[0]) * f64::from(row[0]);
        let rows = Rows::dense(&row, 1);
        let acc = &mut sum[i..=i];
        let clipped = match selection {
            Selection::Sample(flags) if !flags[i] => Ok(()),
            Selection::All | Selection::Sample(_) => clip_block_with_norms(
                RowsAt::Host(&rows),
                &[0],
                &[norm],
                &mut [slot],
                clip,
                on_nonfinite,
                grid,
                acc,
                &mut block,
            ),
            Selection::ChargedSample(flags, rule) => charged_sample(
                RowsAt::Host(&rows),
                &[norm],
                &mut [(0, slot)],
                (&flags[i..=i], rule),
                (clip, on_nonfinite, grid),
                acc,
                &mut block,
            ),
        };
        clipped.map_err(|_| Error::State(format!("canary {i}'s gradient is not finite")))?;
    }
    Ok(sum)
}

/// One micro-batch of a method that charges every example ([`Selection::ChargedSample`]): every
/// example of `batch` (row j of `rows`) pays its method's charge in its own ledger
/// ([`ChargeRule`]); the clip kernel adds the sampled rows within the squared norm that charge paid for. The others add nothing,
/// so the kernel never sees them: a non-finite one (charged in full) is not the kernel's to
/// skip or refuse, as it would not be in plain DP-SGD. On a non-finite row under
/// `on_nonfinite = "error"`, the position in `batch` of the example.
fn charged_sample(
    rows: RowsAt<'_, '_>,
    norms: &[f64],
    batch: &mut [(usize, &mut LedgerSlot<'_>)],
    (sample, rule): (&[bool], &dyn ChargeRule),
    (clip, policy, grid): (f64, NonFinitePolicy, SumGrid),
    sum: &mut [i64],
    block: &mut BlockStats,
) -> std::result::Result<(), usize> {
    let (mut kept, mut caps) = (Vec::new(), Vec::new());
    for (j, (i, slot)) in batch.iter_mut().enumerate() {
        debug_assert!(rows.is_squared_norm_of(j, norms[j]), "the norm of row {j}");
        let cap = rule.charge(norms[j], slot, clip);
        if sample[*i] {
            kept.push(j);
            caps.push(cap);
        }
    }
    let mut spent = vec![0.0f64; caps.len()];
    let mut slots: Vec<LedgerSlot<'_>> =
        caps.iter().zip(spent.iter_mut()).map(|(&cap, sp)| LedgerSlot::with_budget(cap, sp)).collect();
    let mut slots: Vec<&mut LedgerSlot<'_>> = slots.iter_mut().collect();
    clip_block_with_norms(rows, &kept, norms, &mut slots, clip, policy, grid, sum, block).map_err(|k| kept[k])
}
