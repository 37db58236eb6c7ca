//! The clipping kernel of [FZ21] Algorithm 3 — the one path training uses (through
//! [`crate::train::step`]), tested and benchmarked here.
//!
//! For each example: ‖gᵢ‖², the ledger grant c² = min(‖gᵢ‖², C², B_norm − spentᵢ) (charged
//! before anything is released), and the factor by which the row enters the clipped sum
//! ([`clip_factor`]); then the clipped rows of a block are rounded onto a grid and added to an
//! integer sum while they are still in cache ([`clip_block`]).
//!
//! **Contract: the sum moves by at most what an example was charged, in the arithmetic the
//! computer does.** Summing clipped rows in floating point does not give that: removing one
//! example changes the rounding of every later partial sum, so the f32 sum of the others can move
//! by more than the example contributed (floating-point sensitivity: [CSVW22]; an adversarial
//! sum of 60,000 rows moved by 1.08·C). Here every example's clipped row is rounded
//! coordinate-wise onto a grid of step γ, in integers, and the integer sums are exact in any
//! order: the sum of a dataset and of its neighbour differ by exactly the neighbour's rounded
//! row, whose norm is at most √granted (the rounding, at most √p·γ/2 in norm, is taken from the
//! row's room before scaling, see [`clip_factor`]). Two grids ([`SumGrid`]):
//! - for floating-point Gaussian noise, a fine one, γ = 2^⌈log₂(C·n)⌉⁻⁵⁰ ([`SumGrid::fixed_point`]):
//!   every coordinate of the sum stays below 2⁵³ grid units, so the sum converts to f64 exactly
//!   and the Gaussian mechanism is applied to the exact value (the rounding loses at most
//!   √p·γ/2 ≤ √p·n·C·2⁻⁵⁰ of each row's norm: 4.7·10⁻⁹·C for the Opacus CNN on MNIST);
//! - for discrete-Gaussian noise, the coarse grid the noise lives on ([`SumGrid::discrete`]).
//!
//! A row whose gradient is NaN or infinite contributes exactly nothing (it is never read into
//! the sum) and is still charged the worst case min(C², remaining) under the default
//! [`NonFinitePolicy::Skip`].
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193
//! [CSVW22]: https://arxiv.org/abs/2207.10635

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::accounting::filter::LedgerSlot;

mod grid;
pub mod kept;
mod rows;

pub use grid::{ClipOutOfRange, SumGrid};
pub use kept::{DeviceGrid, KeptRows};
pub use rows::{Outer, Rows, outer_squared_norm};

/// Relative shrink of every clip factor (2⁻²⁰ ≈ 1e-6): covers the f64 rounding of the squared
/// norm (≤ P·2⁻⁵³ relative for P parameters), of the factor's own few operations and of a product
/// xⱼ·f rounded to f64 before it is rounded to the grid (2⁻⁵³), with a wide margin. With a
/// correctly rounded fused multiply-add (`rounded_bits`: the FMA instruction, or glibc's `fma`)
/// the product is not rounded first and each coordinate moves by at most ½; some C runtimes'
/// `fma` on processors without FMA round the product first, and the margin covers that too.
pub const FACTOR_SHRINK: f64 = 1.0 - 1.0 / (1u64 << 20) as f64;

/// The most parameters a clipped row may have: [`FACTOR_SHRINK`] covers the squared norm's
/// rounding, ≤ P·2⁻⁵³ relative, only while that is below 2⁻²⁰ (here with a factor 2 to spare;
/// θ alone would take 16 GiB). A gradient sum refuses a larger model before computing anything.
pub const MAX_CLIPPED_PARAMS: usize = 1 << 32;

/// 1.5·2⁵²: for |y| < 2⁵¹, `y + ROUND_MAGIC` lies in [2⁵², 2⁵³), where doubles are the integers,
/// so the addition (fused with the product that gives y: [`rounded_bits`]) rounds y to the
/// nearest integer (ties to even) and the difference of the bit patterns is that integer.
/// Branch-free and vectorisable, unlike `f64::round` and `as i64`.
const ROUND_MAGIC: f64 = 6_755_399_441_055_744.0;

/// What to do with an example whose gradient is NaN or infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonFinitePolicy {
    /// Drop the example from this step: it contributes exactly nothing and is charged the
    /// worst case min(C², remaining). Private, and the default; the number of skipped
    /// examples is reported to the operator only (confidential files).
    #[default]
    Skip,
    /// Stop with an error naming the example. NOT PRIVATE: whether a model is released at
    /// all then depends on single examples, so runs with this policy are marked non-private.
    Error,
}

/// One example's outcome (confidential diagnostics; never released).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClipOutcome {
    /// ‖gᵢ‖ before clipping (NaN for a non-finite gradient).
    pub norm: f64,
    /// The squared norm charged to the example's ledger.
    pub granted: f64,
}

/// A non-finite per-example gradient under [`NonFinitePolicy::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonFiniteGradient;

/// Algorithm 3's rule for one example: computes ‖gᵢ‖², charges the ledger `slot` with
/// c² = min(‖gᵢ‖², C², remaining) and returns the factor f (in grid units) by which the row
/// enters the sum: the rounded row round(f·gᵢ) has norm at most √granted·γ⁻¹, because
/// f = (√granted − √p·γ/2)/(‖gᵢ‖·γ), shrunk by [`FACTOR_SHRINK`] for the f64 rounding of ‖gᵢ‖²
/// and of f and rounded toward zero to [`FACTOR_BITS`] significant bits (so that f·δ is exact
/// for an f32 δ: [`Outer`]), and rounding each exact product f·xⱼ moves it by at most ½. The
/// factor is 0 for a zero, skipped or exhausted example, or when √granted is below the
/// rounding's √p·γ/2.
///
/// ```
/// use dpgd::accounting::filter::IndividualFilter;
/// use dpgd::clip::{clip_factor, NonFinitePolicy, SumGrid};
/// let mut ledger = IndividualFilter::new(1, 2.0).unwrap(); // B_norm = 2, C = 1
/// let grid = SumGrid::fixed_point(1.0, 1).unwrap();
/// let (f, out) = clip_factor(&[3.0, 4.0], &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Skip, grid).unwrap();
/// assert_eq!((out.norm, out.granted), (5.0, 1.0)); // clipped to C
/// let scale = f * grid.gamma(); // what multiplies the row, in real units
/// assert!((scale - 0.2).abs() < 1e-5 && scale < 0.2);
/// ```
///
/// # Errors
/// [`NonFiniteGradient`] for a NaN or infinite gradient under [`NonFinitePolicy::Error`]
/// (the slot is then not charged).
pub fn clip_factor(
    row: &[f32],
    slot: &mut LedgerSlot<'_>,
    clip: f64,
    policy: NonFinitePolicy,
    grid: SumGrid,
) -> Result<(f64, ClipOutcome), NonFiniteGradient> {
    clip_factor_of(row.len(), squared_norm(row), slot, clip, policy, grid)
}

/// [`clip_factor`] for a row of `len` values whose squared norm `sq` was computed where the row
/// was written (see [`clip_block_with_norms`] for what `sq` must be). A negative `sq` (never the
/// sum of squares: a broken engine) is treated as a non-finite one: the example is charged the
/// worst case and adds nothing.
fn clip_factor_of(
    len: usize,
    sq: f64,
    slot: &mut LedgerSlot<'_>,
    clip: f64,
    policy: NonFinitePolicy,
    grid: SumGrid,
) -> Result<(f64, ClipOutcome), NonFiniteGradient> {
    if !(sq.is_finite() && sq >= 0.0) {
        return match policy {
            NonFinitePolicy::Error => Err(NonFiniteGradient),
            NonFinitePolicy::Skip => Ok((0.0, ClipOutcome { norm: f64::NAN, granted: slot.grant(clip * clip) })),
        };
    }
    if sq == 0.0 {
        return Ok((0.0, ClipOutcome { norm: 0.0, granted: 0.0 }));
    }
    let granted = slot.grant(sq.min(clip * clip));
    let room = granted.sqrt() - (len as f64).sqrt() * grid.gamma() / 2.0;
    // room/γ ≤ 2⁵⁰ first: the quotient by ‖gᵢ‖ then stays in range for any row and clip.
    let f = if room > 0.0 { room / grid.gamma() * FACTOR_SHRINK / sq.sqrt() } else { 0.0 };
    Ok((short_factor(f), ClipOutcome { norm: sq.sqrt(), granted }))
}

/// Significant bits of a clip factor: 53 − 24, so that the factor times an f32 value is exact
/// in f64 ([`Outer`]'s kernel multiplies it by δ before the fused rounding with a).
pub const FACTOR_BITS: u32 = 29;

/// `f ≥ 0` rounded toward zero to [`FACTOR_BITS`] significant bits (the low bits of its
/// significand cleared): never upward, so a row scaled by it adds at most what the unshortened
/// factor allows; a relative change below 2⁻²⁸ for a normal f (a subnormal one, which scales
/// any row to far below a grid unit, may become 0).
fn short_factor(f: f64) -> f64 {
    f64::from_bits(f.to_bits() & !((1u64 << (52 - (FACTOR_BITS - 1))) - 1))
}

/// What the kernel did with a block of rows (confidential diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockStats {
    /// Rows clipped and charged.
    pub rows: usize,
    /// Rows with a NaN or infinite gradient, skipped (charged, contributing nothing).
    pub skipped_nonfinite: usize,
}

impl BlockStats {
    /// Adds another block's counts.
    pub fn add(&mut self, other: BlockStats) {
        self.rows += other.rows;
        self.skipped_nonfinite += other.skipped_nonfinite;
    }
}

/// The clipping kernel over a block of `slots.len()` rows of length `p` (row r is
/// `rows[r·p..(r+1)·p]`, charged to `slots[r]`): charges each example ([`clip_factor`]), then
/// adds the rounded clipped rows to `acc` (integers in units of the grid's γ) in groups of up to
/// 64 rows, four rows at a time, so that the accumulator (8 bytes per parameter) is swept once
/// per four rows. Rows with factor 0 are never read into the sum. The integer sum is exact, so
/// blocks may be combined in any order.
///
/// # Errors
/// The index (within the block) of the first non-finite row under [`NonFinitePolicy::Error`];
/// the groups of 64 before its own have been charged and added, the rows before it in its
/// group charged only (nothing is released after an error).
#[allow(clippy::too_many_arguments)]
pub fn clip_block(
    rows: &[f32],
    p: usize,
    slots: &mut [&mut LedgerSlot<'_>],
    clip: f64,
    policy: NonFinitePolicy,
    grid: SumGrid,
    acc: &mut [i64],
    stats: &mut BlockStats,
) -> Result<(), usize> {
    let norms: Vec<f64> = rows.chunks_exact(p.max(1)).take(slots.len()).map(squared_norm).collect();
    let which: Vec<usize> = (0..slots.len()).collect();
    clip_block_with_norms(RowsAt::Host(&Rows::dense(rows, p)), &which, &norms, slots, clip, policy, grid, acc, stats)
}

/// [`clip_block`] for rows an engine kept on its device ([`KeptRows`]; row r charged to
/// `slots[r]`, `norms[r]` at least its exact squared norm: [`kept::squared_norm_bound`]) in
/// micro-batches of `batch` rows (at least the rows charged): each example is charged and given
/// its factor on the device grid [`DeviceGrid::new`]`(grid, clip, batch)`, and the device's
/// integer sum of the live rows
/// is added to `acc` in units of `grid`. What the trainer does with an engine that keeps its
/// rows.
///
/// # Errors
/// As [`clip_block`].
#[allow(clippy::too_many_arguments)]
pub fn clip_kept_block(
    rows: &mut dyn KeptRows,
    norms: &[f64],
    slots: &mut [&mut LedgerSlot<'_>],
    clip: f64,
    policy: NonFinitePolicy,
    (grid, batch): (SumGrid, usize),
    acc: &mut [i64],
    stats: &mut BlockStats,
) -> Result<(), usize> {
    let which: Vec<usize> = (0..slots.len()).collect();
    // A grid for fewer rows than are charged would let the device's 32-bit sum overflow.
    let at = RowsAt::Device(rows, DeviceGrid::new(grid, clip, batch.max(slots.len())));
    clip_block_with_norms(at, &which, norms, slots, clip, policy, grid, acc, stats)
}

/// Where a micro-batch's rows are for the clip to add them: written on the host, or kept by
/// the engine on its device (a GPU), which rounds them onto the coarser [`DeviceGrid`] and sums
/// them there ([`kept`]).
pub(crate) enum RowsAt<'r, 'a> {
    /// Written rows and outer blocks, on the host.
    Host(&'r Rows<'a>),
    /// Rows the engine kept, and the grid it rounds them onto.
    Device(&'r mut dyn KeptRows, DeviceGrid),
}

impl RowsAt<'_, '_> {
    fn p(&self) -> usize {
        match self {
            RowsAt::Host(rows) => rows.p(),
            RowsAt::Device(rows, _) => rows.p(),
        }
    }

    /// Whether `sq` is row r's squared norm as the engine contract asks (debug checks; a kept
    /// row is not on the host to check: the engine contract test checks its bounds).
    pub(crate) fn is_squared_norm_of(&self, r: usize, sq: f64) -> bool {
        match self {
            RowsAt::Host(rows) => rows.is_squared_norm_of(r, sq),
            RowsAt::Device(..) => true,
        }
    }

    /// Adds the `live` rows (row, clip factor in units of [`grid`](Self::grid)) to `acc`, in
    /// units of the run's grid.
    fn add(&mut self, live: &[(usize, f64)], acc: &mut [i64]) {
        match self {
            RowsAt::Host(rows) => rows.add_rounded(live, acc),
            RowsAt::Device(rows, grid) => {
                if live.is_empty() {
                    return;
                }
                let factors: Vec<(usize, f32)> = live.iter().map(|&(r, f)| (r, kept::device_factor(f))).collect();
                let mut sum = vec![0i64; rows.p()];
                rows.sum_rounded(&factors, &mut sum);
                grid.add_to(&sum, acc);
            }
        }
    }

    /// The grid the rows are rounded onto for a sum on `sum`.
    fn grid(&self, sum: SumGrid) -> SumGrid {
        match self {
            RowsAt::Host(_) => sum,
            RowsAt::Device(_, grid) => grid.grid(),
        }
    }

    /// Rows charged before their group is added: 64 on the host (the group's rows still in
    /// cache); the whole micro-batch on a device (one sum and one transfer).
    fn group(&self) -> usize {
        match self {
            RowsAt::Host(_) => 64,
            RowsAt::Device(..) => usize::MAX,
        }
    }
}

/// [`clip_block`] over the rows `which` of `rows` (row `which[k]` charged to `slots[k]`), with
/// each row's squared norm given. For written rows, `norms[r]` must be the f64 sum of the
/// squares of exactly row r's values, added in any order (what [`Rows::squared_norm`] computes
/// up to the order of its additions, or an outer block's [`outer_squared_norm`];
/// [`FACTOR_SHRINK`] covers the rounding of either); for kept rows, an upper bound of it
/// ([`kept::squared_norm_bound`]). An engine computes it while the rows it writes are still in
/// cache ([`crate::per_example::PerExample::gradients_with_norms`]); a smaller value would let a
/// row add more than its example is charged, so the engine contract test checks every engine's
/// norms against its rows, and builds with debug assertions recompute each written row's norm
/// here and stop on a mismatch.
///
/// # Errors
/// As [`clip_block`], the index into `which`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn clip_block_with_norms(
    mut rows: RowsAt<'_, '_>,
    which: &[usize],
    norms: &[f64],
    slots: &mut [&mut LedgerSlot<'_>],
    clip: f64,
    policy: NonFinitePolicy,
    grid: SumGrid,
    acc: &mut [i64],
    stats: &mut BlockStats,
) -> Result<(), usize> {
    // Internal: callers size the rows, norms and slots from one micro-batch.
    assert!(which.len() == slots.len(), "a row per slot");
    let (group, row_grid, p) = (rows.group(), rows.grid(grid), rows.p());
    for (g, (which, slots)) in which.chunks(group).zip(slots.chunks_mut(group)).enumerate() {
        let mut live = Vec::with_capacity(which.len());
        for (k, (&r, slot)) in which.iter().zip(slots.iter_mut()).enumerate() {
            let sq = norms[r];
            debug_assert!(rows.is_squared_norm_of(r, sq), "row {r}: norm {sq} given for a row of another norm");
            let (f, out) = clip_factor_of(p, sq, slot, clip, policy, row_grid).map_err(|_| g * group + k)?;
            if f != 0.0 {
                live.push((r, f));
            }
            stats.rows += 1;
            stats.skipped_nonfinite += usize::from(out.norm.is_nan());
        }
        rows.add(&live, acc);
    }
    Ok(())
}

/// `acc += Σᵣ round(w[r] · rows[r])` (each product rounded to the nearest integer) for
/// `w.len()` rows of length `p`, skipping rows with weight 0 (so a zero weight on a NaN row
/// adds nothing). Every `|w[r]·xⱼ|` must be below 2⁵¹ ([`clip_factor`]'s factors are). The
/// kernel [`clip_block`] runs on written rows, in column blocks that stay in L1, four rows at a
/// time.
pub fn add_rounded(rows: &[f32], p: usize, w: &[f64], acc: &mut [i64]) {
    debug_assert!(rows.len() >= w.len() * p && acc.len() == p);
    let live: Vec<(usize, f64)> = w.iter().copied().enumerate().filter(|&(_, wr)| wr != 0.0).collect();
    add_rounded_columns(rows, p, &live, 0..p, acc);
}

crate::simd::kernel! {
/// `acc += Σ round(w · rows[r][cols])` over the `live` rows (row, weight ≠ 0) of length `p`,
/// for the columns `cols` (`acc` holds just those). Works in column blocks that stay in L1, so
/// `acc` is read and written once per call and every row is read once. Compiled for AVX-512 and
/// AVX2 ([`crate::simd`]; the result is the same integers on every path: the arithmetic is IEEE
/// f64 either way).
fn add_rounded_columns(rows: &[f32], p: usize, live: &[(usize, f64)], cols: Range<usize>, acc: &mut [i64]) {
    const BLOCK: usize = 512;
    debug_assert!(acc.len() == cols.len() && cols.end <= p);
    // The rows four at a time: each value of `acc` is then loaded and stored once per four rows.
    let row = |r: usize, start: usize, end: usize| &rows[r * p + start..r * p + end];
    for start in cols.clone().step_by(BLOCK) {
        let end = (start + BLOCK).min(cols.end);
        let a = &mut acc[start - cols.start..end - cols.start];
        let quads = live.chunks_exact(4);
        for &(r, wr) in quads.remainder() {
            for (y, &v) in a.iter_mut().zip(row(r, start, end)) {
                *y += rounded(f64::from(v), wr);
            }
        }
        for q in quads {
            let [(r0, w0), (r1, w1), (r2, w2), (r3, w3)] = [q[0], q[1], q[2], q[3]];
            let (x0, x1, x2, x3) = (row(r0, start, end), row(r1, start, end), row(r2, start, end), row(r3, start, end));
            for ((((y, &v0), &v1), &v2), &v3) in a.iter_mut().zip(x0).zip(x1).zip(x2).zip(x3) {
                // Σ (bitsᵣ − magic) as Σ bitsᵣ − 4·magic: the same integer (wrapping
                // arithmetic is exact modulo 2⁶⁴, and the sum fits), three subtractions fewer.
                let bits = rounded_bits(f64::from(v0), w0)
                    .wrapping_add(rounded_bits(f64::from(v1), w1))
                    .wrapping_add(rounded_bits(f64::from(v2), w2))
                    .wrapping_add(rounded_bits(f64::from(v3), w3));
                *y += bits.wrapping_sub(MAGIC_BITS.wrapping_mul(4));
            }
        }
    }
}
}

/// `round(x · w)` to the nearest integer (ties to even), for `|x · w| < 2⁵¹`: the difference
/// of [`rounded_bits`] and [`ROUND_MAGIC`]'s bit pattern.
#[inline(always)]
fn rounded(x: f64, w: f64) -> i64 {
    rounded_bits(x, w) - MAGIC_BITS
}

/// [`ROUND_MAGIC`]'s bit pattern.
const MAGIC_BITS: i64 = ROUND_MAGIC.to_bits() as i64;

/// The bit pattern of `x · w + ROUND_MAGIC` in one fused multiply-add, rounded once: the exact
/// product is rounded to the nearest integer, so each coordinate of a rounded row moves by at
/// most ½ (a product rounded to f64 first could round a second time across a tie: 0.5 + 2⁻⁵³
/// relative; a test). The two operands' exact product is the clipped coordinate: a written f32
/// value and its factor, or for an [`Outer`] block the exact factor·δ and a. The AVX-512 and
/// AVX2 variants run the FMA instruction, exactly rounded, so they give the same integers. The
/// baseline variant (a processor without FMA) calls the C library's `fma`: exact in glibc; a
/// runtime whose `fma` rounds the product first gives at most the 2⁻⁵³ relative more that
/// [`FACTOR_SHRINK`] leaves room for.
#[inline(always)]
fn rounded_bits(x: f64, w: f64) -> i64 {
    x.mul_add(w, ROUND_MAGIC).to_bits() as i64
}

crate::simd::kernel! {
/// Σ x² with exact f32 products accumulated in 32 f64 lanes (four independent vector sums, so
/// the additions do not wait on each other; compiled for AVX-512 and AVX2: [`crate::simd`]),
/// the lanes then added in a fixed tree; relative error ≤ P·2⁻⁵³ for P values, as for any
/// order of the sum ([`FACTOR_SHRINK`] covers it up to [`MAX_CLIPPED_PARAMS`]). Infinite or
/// NaN for a row with a non-finite entry.
#[must_use]
pub fn squared_norm(x: &[f32]) -> f64 {
    const LANES: usize = 32;
    let mut lanes = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            let v = f64::from(v);
            *l += v * v;
        }
    }
    for (l, &v) in lanes.iter_mut().zip(tail) {
        let v = f64::from(v);
        *l += v * v;
    }
    sum_lanes(lanes)
}
}

/// The running lanes of a sum of squares ([`squared_norm`], and engines that add up the squares
/// of what they write), added pairwise in a fixed tree ([`crate::simd::pairwise_sum`]): a
/// sequential sum of 32 would wait on each addition in turn, and the engine sums one slice per
/// layer part and example.
#[inline(always)]
pub(crate) fn sum_lanes(lanes: [f64; 32]) -> f64 {
    crate::simd::pairwise_sum(lanes)
}

/// `acc += a · x` (vectorises).
pub fn axpy(a: f64, x: &[f32], acc: &mut [f32]) {
    let a = a as f32;
    for (y, &v) in acc.iter_mut().zip(x) {
        *y += a * v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::filter::IndividualFilter;
    use proptest::prelude::*;
    use rayon::iter::ParallelIterator;

    /// Runs the kernel over all rows of `grads` against `ledger`; the sum in real units (f64,
    /// exact for the fixed-point grid).
    fn kernel(
        grads: &[f32],
        p: usize,
        ledger: &mut IndividualFilter,
        clip: f64,
        policy: NonFinitePolicy,
        grid: SumGrid,
    ) -> Result<Vec<f64>, usize> {
        let n = grads.len() / p;
        let mut owned: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..n).collect();
        let mut refs: Vec<&mut LedgerSlot<'_>> = owned.iter_mut().collect();
        let mut acc = vec![0i64; p];
        clip_block(grads, p, &mut refs, clip, policy, grid, &mut acc, &mut BlockStats::default())?;
        Ok(acc.iter().map(|&v| v as f64 * grid.gamma()).collect())
    }

    /// Scalar reference: the textbook formula in f64, one example at a time.
    fn reference(grads: &[f32], p: usize, spent: &mut [f64], budget: f64, clip: f64) -> Vec<f64> {
        let mut sum = vec![0.0f64; p];
        for (i, row) in grads.chunks(p).enumerate() {
            let norm = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
            let c = norm.min(clip).min((budget - spent[i]).max(0.0).sqrt());
            spent[i] += c * c;
            if norm > 0.0 {
                for (s, &v) in sum.iter_mut().zip(row) {
                    *s += f64::from(v) * c / norm;
                }
            }
        }
        sum
    }

    #[test]
    fn kernel_matches_scalar_reference_over_several_steps() {
        let (n, p, budget, clip) = (200, 37, 2.5, 1.0);
        let mut ledger = IndividualFilter::new(n, budget).unwrap();
        let mut spent = vec![0.0; n];
        for grid in [SumGrid::fixed_point(clip, n).unwrap(), SumGrid::discrete(clip, p)] {
            for step in 0..5 {
                let grads: Vec<f32> =
                    (0..n * p).map(|i| (((i * 31 + step * 7) % 97) as f32 - 48.0) / (40.0 + (i / p) as f32)).collect();
                let want = reference(&grads, p, &mut spent, budget, clip);
                let got = kernel(&grads, p, &mut ledger, clip, NonFinitePolicy::Skip, grid).unwrap();
                // The coarse grid of the discrete Gaussian moves each row by up to 1e-3·C.
                let tol = if grid.gamma() > 1e-6 { 2e-3 * n as f64 } else { 1e-6 };
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= tol * (1.0 + w.abs()), "step {step}: {g} vs {w}");
                }
                for (i, want) in spent.iter().enumerate() {
                    assert!((ledger.spent(i) - want).abs() <= 1e-9, "ledger of {i}");
                    assert!(ledger.spent(i) <= budget);
                }
            }
            assert!(ledger.active_count_non_private() < n, "some examples must run out in 5 steps at budget 2.5");
            ledger = IndividualFilter::new(n, budget).unwrap();
            spent = vec![0.0; n];
        }
    }

    /// The four-row kernel gives exactly the integers of a row-by-row sum, with zero-weight rows
    /// (a NaN among them) anywhere and every count of live rows modulo four.
    #[test]
    fn add_rounded_matches_one_row_at_a_time() {
        let p = 1100; // three column blocks, the last partial
        for live in 0..=9usize {
            // `live` rows with weights; row 1 (with a NaN) and the last row without
            let n = live + 2;
            let mut rows: Vec<f32> = (0..n * p).map(|i| ((i * 37) % 101) as f32 / 7.0 - 7.0).collect();
            rows[p + 5] = f32::NAN;
            let w: Vec<f64> = (0..n).map(|r| if r == 1 || r == n - 1 { 0.0 } else { 1e6 * (r + 1) as f64 }).collect();
            let mut fast = vec![3i64; p];
            add_rounded(&rows, p, &w, &mut fast);
            let mut slow = vec![3i64; p];
            for (r, &wr) in w.iter().enumerate().filter(|&(_, &wr)| wr != 0.0) {
                for (y, &v) in slow.iter_mut().zip(&rows[r * p..(r + 1) * p]) {
                    *y += exact_round(f64::from(v), wr);
                }
            }
            assert_eq!(fast, slow, "{live} live rows");
        }
    }

    /// round(v·w) to the nearest integer, ties to even, in exact integer arithmetic (the
    /// product of the two significands in an i128): the reference for [`add_rounded`].
    fn exact_round(x: f64, w: f64) -> i64 {
        // x = m·2^e exactly
        let parts = |x: f64| {
            let (bits, sign) = (x.to_bits(), if x.is_sign_negative() { -1i128 } else { 1 });
            let (exp, frac) = (((bits >> 52) & 0x7ff) as i32, i128::from(bits & ((1 << 52) - 1)));
            if exp == 0 { (sign * frac, -1074) } else { (sign * (frac | 1 << 52), exp - 1075) }
        };
        let ((mv, ev), (mw, ew)) = (parts(x), parts(w));
        let (m, e) = (mv * mw, ev + ew);
        if e >= 0 {
            return (m << e) as i64;
        }
        let s = e.unsigned_abs();
        if s >= 120 {
            return 0; // |m| < 2¹⁰⁶: below ½
        }
        let (q, r, half) = (m.unsigned_abs() >> s, m.unsigned_abs() & ((1 << s) - 1), 1u128 << (s - 1));
        let q = (q + u128::from(r > half || (r == half && q & 1 == 1))) as i64;
        if m < 0 { -q } else { q }
    }

    /// Each coordinate is the exact product rounded once: here 2.5 + 2⁻⁵³·… just above the
    /// tie, whose product rounded to f64 first is 2.5 exactly and rounds to even, 2: an error
    /// above ½, outside the rounding the clip factor leaves room for. Fails with the product
    /// rounded before the rounding addition.
    #[test]
    fn products_just_past_a_tie_round_once() {
        let (v, w) = (1.0 + f32::EPSILON, 2.499_999_701_976_811_7_f64);
        assert_eq!(f64::from(v) * w, 2.5, "the product rounded to f64 lands on the tie");
        assert_eq!(exact_round(f64::from(v), w), 3);
        for live in [1, 4, 5] {
            let rows = vec![v; live];
            let mut acc = vec![0i64; 1];
            add_rounded(&rows, 1, &vec![w; live], &mut acc);
            assert_eq!(acc[0], 3 * live as i64, "{live} rows");
            let mut acc = vec![0i64; 1];
            add_rounded(&rows, 1, &vec![-w; live], &mut acc);
            assert_eq!(acc[0], -3 * live as i64, "{live} rows, negated");
        }
    }

    proptest! {
        /// Any rows and weights with products below 2⁵¹: the exact rounded sum.
        #[test]
        fn add_rounded_is_the_exact_rounded_sum(
            rows in proptest::collection::vec(-1e3f32..1e3, 1..40),
            w in proptest::collection::vec(-1e12f64..1e12, 1..6),
        ) {
            let p = rows.len() / w.len();
            prop_assume!(p > 0);
            let mut acc = vec![0i64; p];
            add_rounded(&rows, p, &w, &mut acc);
            for (j, &got) in acc.iter().enumerate() {
                let want: i64 = w.iter().enumerate().filter(|&(_, &wr)| wr != 0.0).map(|(r, &wr)| exact_round(f64::from(rows[r * p + j]), wr)).sum();
                prop_assert_eq!(got, want);
            }
        }
    }

    /// `n` rows of `before` written values, an outer block of `dout × din` and `after` written
    /// values, from deterministic pseudo-random values: factors of magnitude up to 2^`scale`,
    /// written values up to 2^(2·`scale`) like the products (row 1's δ has a NaN when there are
    /// two rows or more).
    struct OuterCase {
        values: Vec<f32>,
        delta: Vec<f32>,
        input: Vec<f32>,
        p: usize,
        at: usize,
        dout: usize,
        din: usize,
    }

    impl OuterCase {
        fn new(n: usize, (before, dout, din, after): (usize, usize, usize, usize), seed: u64, scale: i32) -> Self {
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 * 2f32.powi(scale)
            };
            let p = before + dout * din + after;
            let values = (0..n * p).map(|_| next() * 2f32.powi(scale)).collect();
            let mut delta: Vec<f32> = (0..n * dout).map(|_| next()).collect();
            let input = (0..n * din).map(|_| next()).collect();
            if n > 1 {
                delta[dout] = f32::NAN;
            }
            Self { values, delta, input, p, at: before, dout, din }
        }

        fn rows(&self) -> Rows<'_> {
            let (at, dout, din) = (self.at, self.dout, self.din);
            let block = Outer { at, dout, din, delta: &self.delta, input: &self.input };
            Rows::with_outer(&self.values, self.p, vec![block])
        }
    }

    proptest! {
        /// Rows with an outer block anywhere, any number of live rows, blocks wider than the
        /// kernel's column block: every coordinate of the sum is the sum of the rows' values
        /// rounded once, an outer block's values being the exact products of its factors.
        #[test]
        fn outer_blocks_add_their_exact_products_rounded_once(
            n in 1usize..10,
            shape in (0usize..5, 1usize..4, 1usize..300, 0usize..5),
            seed in any::<u64>(),
            scale in -20i32..10,
        ) {
            let case = OuterCase::new(n, shape, seed, scale);
            let rows = case.rows();
            // row 1 (with the NaN) adds nothing; weights keep every |w·x| below 2⁵¹ and have
            // the clip factors' few significant bits
            let weight = |r: usize| short_factor((r as f64 + 0.37) * 2f64.powi(40 - 2 * scale));
            let live: Vec<(usize, f64)> = (0..n).filter(|&r| r != 1).map(|r| (r, weight(r))).collect();
            let mut acc = vec![5i64; case.p];
            rows.add_rounded(&live, &mut acc);
            for (j, &got) in acc.iter().enumerate() {
                let want = 5 + live.iter().map(|&(r, w)| exact_round(rows.value(r, j), w)).sum::<i64>();
                prop_assert_eq!(got, want, "coordinate {}", j);
            }
        }

        /// What an example whose row has an outer block adds is at most what it is charged, its
        /// squared norm taken from the factors as the engine takes it, at any magnitudes.
        #[test]
        fn outer_rows_add_at_most_their_charge(
            shape in (0usize..4, 1usize..5, 1usize..40, 0usize..4),
            seed in any::<u64>(),
            scale in -70i32..63,
            log_clip in -100f64..100.0,
            log_budget in -60f64..60.0,
            n in 1usize..10_000_000,
        ) {
            let case = OuterCase::new(1, shape, seed, scale);
            let rows = case.rows();
            let written: f64 = [&case.values[..case.at], &case.values[case.at + case.dout * case.din..]]
                .iter()
                .map(|v| squared_norm(v))
                .sum();
            let norm = written + rows.outer()[0].squared_norm(0);
            let (clip, grid) = (10f64.powf(log_clip), SumGrid::fixed_point(10f64.powf(log_clip), n).unwrap());
            let mut ledger = IndividualFilter::new(1, 10f64.powf(log_budget)).unwrap();
            let mut acc = vec![0i64; case.p];
            let mut slot = ledger.slot_mut(0);
            let stats = &mut BlockStats::default();
            clip_block_with_norms(RowsAt::Host(&rows), &[0], &[norm], &mut [&mut slot], clip, NonFinitePolicy::Skip, grid, &mut acc, stats)
                .unwrap();
            let added = acc.iter().map(|&v| (v as f64 * grid.gamma()).powi(2)).sum::<f64>().sqrt();
            prop_assert!(added <= ledger.spent(0).sqrt(), "{} > {}", added, ledger.spent(0).sqrt());
        }
    }

    /// Clip factors are rounded toward zero to 29 significant bits, never up.
    #[test]
    fn factors_are_shortened_toward_zero() {
        for f in [1.0, 0.1, 1.0 / 3.0, 2f64.powi(50) * 0.999, 1e-300, 5e-324, 0.0, f64::MAX] {
            let s = short_factor(f);
            assert!(s <= f && ((f - s) <= f * 2f64.powi(-28) || !f.is_normal()), "{f} → {s}");
            let significant = 64 - s.to_bits().trailing_zeros().min(52) - 11;
            assert!(s == 0.0 || significant <= FACTOR_BITS, "{f} → {s}: {significant} bits");
        }
        let mut ledger = IndividualFilter::new(1, 1.0).unwrap();
        let grid = SumGrid::fixed_point(1.0, 3).unwrap();
        let (f, _) = clip_factor(&[0.1, 0.3, 0.7], &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Skip, grid).unwrap();
        assert_eq!(f, short_factor(f));
        assert_ne!(f, 0.0);
    }

    /// The factors' squared norm is the row's as the debug check computes it, and a norm that
    /// leaves out the outer block is caught.
    #[test]
    fn outer_squared_norm_is_the_blocks() {
        let case = OuterCase::new(1, (2, 3, 50, 1), 9, 3);
        let rows = case.rows();
        let written: f64 = [&case.values[..2], &case.values[152..]].iter().map(|v| squared_norm(v)).sum();
        let block = outer_squared_norm(&case.delta, &case.input);
        assert!(rows.is_squared_norm_of(0, written + block));
        assert!(!rows.is_squared_norm_of(0, written));
        assert!(!rows.is_squared_norm_of(0, squared_norm(&case.values)), "the unread values are not the row's");
    }

    /// A row whose outer block has an infinite factor (δ with ∞, a with zeros: its products ∞·0
    /// are NaN, its factors' norm ∞) is charged the worst case and adds nothing, like any
    /// non-finite row. Before, the debug recheck refused the engine's ∞ against the row's NaN.
    #[test]
    fn a_row_with_an_infinite_factor_adds_nothing_and_is_charged() {
        let (delta, input, values) = ([f32::INFINITY, 1.0], [0.0f32, 2.0, 0.5], [1.0f32; 8]);
        let rows = Rows::with_outer(&values, 8, vec![Outer { at: 1, dout: 2, din: 3, delta: &delta, input: &input }]);
        assert!(rows.squared_norm(0).is_nan());
        let norm = 2.0 + rows.outer()[0].squared_norm(0);
        assert_eq!(norm, f64::INFINITY);
        let mut ledger = IndividualFilter::new(1, 4.0).unwrap();
        let grid = SumGrid::fixed_point(1.0, 1).unwrap();
        let mut acc = vec![0i64; 8];
        let mut slot = ledger.slot_mut(0);
        let stats = &mut BlockStats::default();
        clip_block_with_norms(
            RowsAt::Host(&rows),
            &[0],
            &[norm],
            &mut [&mut slot],
            1.0,
            NonFinitePolicy::Skip,
            grid,
            &mut acc,
            stats,
        )
        .unwrap();
        assert_eq!((ledger.spent(0), stats.skipped_nonfinite), (1.0, 1));
        assert!(acc.iter().all(|&v| v == 0));
    }

    /// Two outer blocks with written values before, between and after them (the layout of two
    /// linear layers with biases): each coordinate of the sum is the exact rounded sum.
    #[test]
    fn rows_with_two_outer_blocks_add_every_coordinate_exactly() {
        let (n, p) = (7, 3 + 3 * 300 + 2 + 2 * 5 + 1);
        let wave = |k: usize, s: f32| (k as f32 * 0.618).sin() * s;
        let values: Vec<f32> = (0..n * p).map(|k| wave(k, 3.0)).collect();
        let (d1, a1): (Vec<f32>, Vec<f32>) =
            ((0..n * 3).map(|k| wave(k + 1, 2.0)).collect(), (0..n * 300).map(|k| wave(k + 2, 1.5)).collect());
        let (d2, a2): (Vec<f32>, Vec<f32>) =
            ((0..n * 2).map(|k| wave(k + 3, 4.0)).collect(), (0..n * 5).map(|k| wave(k + 4, 0.7)).collect());
        let blocks = vec![
            Outer { at: 905, dout: 2, din: 5, delta: &d2, input: &a2 },
            Outer { at: 3, dout: 3, din: 300, delta: &d1, input: &a1 },
        ];
        let rows = Rows::with_outer(&values, p, blocks);
        for live_rows in 1..=n {
            let live: Vec<(usize, f64)> =
                (0..live_rows).filter(|&r| r != 2).map(|r| (r, short_factor(1e9 * (r as f64 + 1.3)))).collect();
            let mut acc = vec![0i64; p];
            rows.add_rounded(&live, &mut acc);
            for (j, &got) in acc.iter().enumerate() {
                let want: i64 = live.iter().map(|&(r, w)| exact_round(rows.value(r, j), w)).sum();
                assert_eq!(got, want, "{live_rows} rows, coordinate {j}");
            }
        }
        // the blocks' values are the products in row-major [dout, din] order
        assert_eq!(rows.value(1, 3 + 300 + 7), f64::from(d1[3 + 1]) * f64::from(a1[300 + 7]));
        assert_eq!(rows.value(0, 905 + 5 + 4), f64::from(d2[1]) * f64::from(a2[4]));
        assert_eq!(rows.value(0, 904), f64::from(values[904]));
    }

    /// A norm given by an engine that leaves out part of its row (here the last value) is
    /// caught before the row is charged or summed, in every debug build.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "norm")]
    fn a_norm_short_of_its_row_is_caught() {
        let rows = [3.0f32, 4.0, 1.0];
        let mut ledger = IndividualFilter::new(1, 100.0).unwrap();
        let mut owned: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..1).collect();
        let mut refs: Vec<&mut LedgerSlot<'_>> = owned.iter_mut().collect();
        let grid = SumGrid::fixed_point(10.0, 1).unwrap();
        let mut acc = vec![0i64; 3];
        let _ = clip_block_with_norms(
            RowsAt::Host(&Rows::dense(&rows, 3)),
            &[0],
            &[25.0],
            &mut refs,
            10.0,
            NonFinitePolicy::Skip,
            grid,
            &mut acc,
            &mut BlockStats::default(),
        );
    }

    /// A negative given norm (a broken engine; release builds do not recheck norms) is charged
    /// the worst case and adds nothing. Before, its factor was NaN and added the NaN's bit
    /// pattern, about 2⁶¹ grid units, to every coordinate of the sum.
    #[test]
    fn a_negative_norm_adds_nothing_and_is_charged_in_full() {
        let mut ledger = IndividualFilter::new(1, 4.0).unwrap();
        let grid = SumGrid::fixed_point(1.0, 1).unwrap();
        let (f, out) = clip_factor_of(2, -1.0, &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Skip, grid).unwrap();
        assert_eq!(f, 0.0);
        assert_eq!(out.granted, 1.0);
        assert_eq!(ledger.spent(0), 1.0);
    }

    /// Norms given by the caller act as the row's own: the same charges and the same sum.
    #[test]
    fn given_norms_clip_as_computed_ones() {
        let (n, p) = (7, 5);
        let rows: Vec<f32> = (0..n * p).map(|i| ((i * 13) % 11) as f32 - 5.0).collect();
        let norms: Vec<f64> =
            rows.chunks(p).map(|r| r.iter().rev().map(|&v| f64::from(v) * f64::from(v)).sum()).collect();
        let grid = SumGrid::fixed_point(2.0, n).unwrap();
        let mut sums = Vec::new();
        for given in [false, true] {
            let mut ledger = IndividualFilter::new(n, 30.0).unwrap();
            let mut owned: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..n).collect();
            let mut refs: Vec<&mut LedgerSlot<'_>> = owned.iter_mut().collect();
            let mut acc = vec![0i64; p];
            let stats = &mut BlockStats::default();
            if given {
                let which: Vec<usize> = (0..n).collect();
                let rows = Rows::dense(&rows, p);
                clip_block_with_norms(
                    RowsAt::Host(&rows),
                    &which,
                    &norms,
                    &mut refs,
                    2.0,
                    NonFinitePolicy::Skip,
                    grid,
                    &mut acc,
                    stats,
                )
                .unwrap();
            } else {
                clip_block(&rows, p, &mut refs, 2.0, NonFinitePolicy::Skip, grid, &mut acc, stats).unwrap();
            }
            drop(owned);
            sums.push((acc, (0..n).map(|i| ledger.spent(i)).collect::<Vec<_>>()));
        }
        assert_eq!(sums[0], sums[1]);
    }

    #[test]
    fn a_non_finite_row_contributes_nothing_and_is_charged() {
        let p = 2;
        let grads = [0.0, 0.0, f32::NAN, 1.0, 3.0, 4.0, f32::INFINITY, 0.0];
        let grid = SumGrid::fixed_point(1.0, 4).unwrap();
        let mut ledger = IndividualFilter::new(4, 4.0).unwrap();
        assert_eq!(kernel(&grads, p, &mut ledger, 1.0, NonFinitePolicy::Error, grid).unwrap_err(), 1);
        let mut ledger = IndividualFilter::new(4, 4.0).unwrap();
        let sum = kernel(&grads, p, &mut ledger, 1.0, NonFinitePolicy::Skip, grid).unwrap();
        assert_eq!(ledger.spent(0), 0.0, "a zero gradient costs nothing");
        assert_eq!(ledger.spent(1), 1.0, "a skipped non-finite example is charged the worst case C²");
        assert_eq!(ledger.spent(3), 1.0);
        assert!((sum[0] - 0.6).abs() < 1e-5 && (sum[1] - 0.8).abs() < 1e-5, "only the finite example contributes");
    }

    /// The sum of `rows` minus the sum with row `i` zeroed out (its neighbour), in real units.
    fn neighbour_difference(rows: &[f32], p: usize, i: usize, clip: f64) -> (f64, f64) {
        let n = rows.len() / p;
        let grid = SumGrid::fixed_point(clip, n).unwrap();
        let mut ledger = IndividualFilter::new(n, 1e9).unwrap();
        let with = kernel(rows, p, &mut ledger, clip, NonFinitePolicy::Skip, grid).unwrap();
        let charged = ledger.spent(i);
        let mut zeroed = rows.to_vec();
        zeroed[i * p..(i + 1) * p].iter_mut().for_each(|v| *v = 0.0);
        let mut ledger = IndividualFilter::new(n, 1e9).unwrap();
        let without = kernel(&zeroed, p, &mut ledger, clip, NonFinitePolicy::Skip, grid).unwrap();
        let moved = with.iter().zip(&without).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
        (moved, charged.sqrt())
    }

    /// The floating-point sensitivity of the clipped sum. A
    /// float sum of clipped rows moves by more than the removed example contributed: after
    /// row 0 (≈ 1, so the partial sum's ulp is 2⁻²⁴), row 1 of ≈ 0.505·2⁻²⁴ rounds the f32 sum up
    /// by a whole ulp, twice what it was charged; over 60,000 chosen rows the excess accumulates
    /// (1.078·C was measured). The integer sum moves by exactly the neighbour's rounded row.
    #[test]
    fn the_sum_moves_by_at_most_what_the_removed_example_was_charged() {
        let (moved, charged) = neighbour_difference(&[1.0, 1.01 * 2f32.powi(-25)], 1, 1, 1.0);
        assert!(moved <= charged, "moved {moved:e} > charged {charged:e}");
        // Adversarial rows: the others sit where f32 partial sums round at ties; the removed
        // example is tiny and first, so every later rounding could flip in a float sum.
        let n = 60_000;
        let mut rows = vec![0.0f32; n];
        rows[0] = 2f32.powi(-30);
        for (j, r) in rows.iter_mut().enumerate().skip(1) {
            *r = if j < 30_000 { 1.0 } else { 0.5 + (j % 7) as f32 * 2f32.powi(-10) + 2f32.powi(-9) };
        }
        let (moved, charged) = neighbour_difference(&rows, 1, 0, 1.0);
        assert!(moved <= charged, "moved {moved:e} > charged {charged:e}");
        // And on rows of many coordinates, for every example removed in turn.
        let p = 33;
        let rows: Vec<f32> = (0..40 * p).map(|k| ((k as f32 * 0.731).sin() * 3.0) / (1.0 + (k / p) as f32)).collect();
        for i in 0..40 {
            let (moved, charged) = neighbour_difference(&rows, p, i, 0.7);
            assert!(moved <= charged, "example {i}: moved {moved:e} > charged {charged:e}");
        }
    }

    #[test]
    fn the_fixed_point_sum_is_exact_in_f64_at_the_largest_contributions() {
        // n examples of norm C, all on one coordinate, with the same sign: the largest sum.
        for n in [1usize, 2, 3, 1000] {
            let grid = SumGrid::fixed_point(1.0, n).unwrap();
            let rows = vec![1.0f32; n];
            let mut ledger = IndividualFilter::new(n, 1.0).unwrap();
            let mut owned: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..n).collect();
            let mut refs: Vec<&mut LedgerSlot<'_>> = owned.iter_mut().collect();
            let mut acc = vec![0i64; 1];
            clip_block(&rows, 1, &mut refs, 1.0, NonFinitePolicy::Skip, grid, &mut acc, &mut BlockStats::default())
                .unwrap();
            assert!(acc[0].unsigned_abs() < 1 << 53, "n = {n}: {} grid units is not exact in f64", acc[0]);
            assert!(((acc[0] as f64 * grid.gamma()) - n as f64).abs() < 1e-6 * n as f64);
        }
        assert!(SumGrid::fixed_point(1e-300, 10).is_err() && SumGrid::fixed_point(1e300, 10).is_err());
    }

    /// ‖γ·round(f·x)‖ in f64, as the kernel adds it.
    fn contributed_norm(row: &[f32], grid: SumGrid, clip: f64, budget: f64) -> (f64, f64) {
        let mut ledger = IndividualFilter::new(1, budget).unwrap();
        let mut acc = vec![0i64; row.len()];
        let mut slot = ledger.slot_mut(0);
        clip_block(
            row,
            row.len(),
            &mut [&mut slot],
            clip,
            NonFinitePolicy::Skip,
            grid,
            &mut acc,
            &mut BlockStats::default(),
        )
        .unwrap();
        let norm = acc.iter().map(|&v| (v as f64 * grid.gamma()).powi(2)).sum::<f64>().sqrt();
        (norm, ledger.spent(0).sqrt())
    }

    #[test]
    fn contributed_norm_never_exceeds_the_charge_at_extreme_magnitudes() {
        for row in [vec![f32::MAX], vec![f32::MAX * 0.9; 7], vec![-3.1e38, 2.9e38, 1.0], vec![1e-45; 9]] {
            for clip in [1.0, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-20] {
                let grid = SumGrid::fixed_point(clip, 60_000).unwrap();
                let (norm, charged) = contributed_norm(&row, grid, clip, 5.0);
                assert!(norm <= charged, "clip {clip}, row {row:?}: contributed {norm} > charged {charged}");
            }
        }
    }

    #[test]
    fn grid_contributions_never_exceed_the_charge() {
        let p = 26_010;
        let grid = SumGrid::discrete(1.0, p);
        assert!((p as f64).sqrt() * grid.gamma() / 2.0 <= 1e-3 && grid.gamma().log2().fract() == 0.0);
        let row: Vec<f32> = (0..p).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        for budget in [5.0, 0.3, 1e-3, 1e-7] {
            let (norm, charged) = contributed_norm(&row, grid, 1.0, budget);
            assert!(norm <= charged, "budget {budget}: {norm} > {charged}");
            assert!(norm >= charged - 2e-3, "budget {budget}: the grid wastes too much: {norm}");
        }
    }

    proptest! {
        /// For any finite row, clip, remaining budget and dataset size, what an example adds is
        /// at most what it was charged.
        #[test]
        fn contributed_norm_never_exceeds_the_charge(
            mant in proptest::collection::vec(-1.0f32..1.0, 1..40),
            exps in proptest::collection::vec(-149i32..128, 1..40),
            log_clip in -100f64..100.0,
            log_budget in -60f64..60.0,
            n in 1usize..10_000_000,
        ) {
            let row: Vec<f32> = mant.iter().zip(exps.iter().cycle()).map(|(m, &e)| {
                let v = f64::from(*m) * 2f64.powi(e);
                (v.clamp(-f64::from(f32::MAX), f64::from(f32::MAX))) as f32
            }).collect();
            let clip = 10f64.powf(log_clip);
            let grid = SumGrid::fixed_point(clip, n).unwrap();
            let (norm, charged) = contributed_norm(&row, grid, clip, 10f64.powf(log_budget));
            prop_assert!(norm <= charged, "{} > {}", norm, charged);
            prop_assert!(charged <= clip * (1.0 + 1e-15));
        }
    }
}
