//! The clipping kernel of [FZ21] Algorithm 3 — the one path training uses (through
//! [`crate::train::step`]), tested and benchmarked here.
//!
//! For each example: ‖gᵢ‖², the ledger grant c² = min(‖gᵢ‖², C², B_norm − spentᵢ) (charged
//! before anything is released), and the factor by which the row enters the clipped sum
//! ([`clip_factor`]); then the clipped sum of a block of rows while they are still in cache
//! ([`clip_block`]).
//!
//! **Contract: an example never contributes more than it was charged.** The factor is computed
//! ([`safe_factor`]) so that the f32 vector actually added, `fl(factor · gᵢ)`, has norm at most
//! √granted for any finite row — entries near `f32::MAX`, subnormal entries, tiny budgets — and
//! rounded *down* to f32. A row whose gradient is NaN or infinite contributes exactly nothing
//! (it is never read into the sum, so no `0 · NaN` can poison it) and is still charged the
//! worst case min(C², remaining) under the default [`NonFinitePolicy::Skip`].
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193

use serde::{Deserialize, Serialize};

use crate::accounting::filter::LedgerSlot;

/// Relative shrink of every clip factor (2⁻²⁰ ≈ 1e-6): covers the f64 rounding of the squared
/// norm (≤ P·2⁻⁵³ relative for P parameters) with a wide margin. The f32 rounding of the
/// scaled row is bounded separately, in [`safe_factor`].
pub const FACTOR_SHRINK: f64 = 1.0 - 1.0 / (1u64 << 20) as f64;

/// Half the smallest positive subnormal f32: the largest absolute error of rounding a product
/// to f32 when the result is subnormal.
const F32_HALF_ULP_SUBNORMAL: f64 = 7.006_492_321_624_085e-46; // 2^-150
/// The unit roundoff of f32 (round to nearest), 2⁻²⁴.
const F32_UNIT_ROUNDOFF: f64 = 5.960_464_477_539_063e-8;

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

/// The largest f32 factor f such that `fl(f · x)` (each product rounded to nearest f32) has
/// ℓ₂ norm at most √`granted` for every row x of `len` values with ‖x‖² = `squared_norm`.
///
/// Each rounded product is within u·|f·xⱼ| + η of the exact one (u = 2⁻²⁴, η = 2⁻¹⁵⁰ for
/// subnormal results), so ‖fl(f·x)‖ ≤ (1 + u)·f·‖x‖ + √len·η; the factor makes the right side
/// at most √granted (shrunk by [`FACTOR_SHRINK`] for the rounding of ‖x‖²) and is rounded down
/// to f32. Returns 0 when √granted is below the subnormal rounding floor.
#[must_use]
pub fn safe_factor(granted: f64, squared_norm: f64, len: usize) -> f32 {
    if !(granted > 0.0 && squared_norm > 0.0 && squared_norm.is_finite()) {
        return 0.0;
    }
    let room = granted.sqrt() - (len as f64).sqrt() * F32_HALF_ULP_SUBNORMAL;
    if room <= 0.0 {
        return 0.0;
    }
    let f = room / ((1.0 + F32_UNIT_ROUNDOFF) * squared_norm.sqrt()) * FACTOR_SHRINK;
    let rounded = f as f32;
    if f64::from(rounded) > f { rounded.next_down().max(0.0) } else { rounded }
}

/// Algorithm 3's rule for one example: computes ‖gᵢ‖², charges the ledger `slot` with
/// c² = min(‖gᵢ‖², C², remaining) and returns the factor by which the row enters the clipped
/// sum ([`safe_factor`]; 0 for a zero, skipped or exhausted example).
///
/// ```
/// use dpgd::accounting::filter::IndividualFilter;
/// use dpgd::clip::{clip_factor, NonFinitePolicy};
/// let mut ledger = IndividualFilter::new(1, 2.0).unwrap(); // B_norm = 2, C = 1
/// let (f, out) = clip_factor(&[3.0, 4.0], &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Skip).unwrap();
/// assert_eq!((out.norm, out.granted), (5.0, 1.0)); // clipped to C
/// assert!((f - 0.2).abs() < 1e-5 && f < 0.2);
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
) -> Result<(f32, ClipOutcome), NonFiniteGradient> {
    let sq = squared_norm(row);
    if !sq.is_finite() {
        return match policy {
            NonFinitePolicy::Error => Err(NonFiniteGradient),
            NonFinitePolicy::Skip => Ok((0.0, ClipOutcome { norm: f64::NAN, granted: slot.grant(clip * clip) })),
        };
    }
    if sq == 0.0 {
        return Ok((0.0, ClipOutcome { norm: 0.0, granted: 0.0 }));
    }
    let granted = slot.grant(sq.min(clip * clip));
    Ok((safe_factor(granted, sq, row.len()), ClipOutcome { norm: sq.sqrt(), granted }))
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
/// `rows[r·p..(r+1)·p]`, charged to `slots[r]`): charges each example, then adds the clipped
/// rows to `acc` in groups of eight, each group as one weighted reduction while its rows are in
/// cache. Rows with factor 0 are never read into the sum.
///
/// # Errors
/// The index (within the block) of the first non-finite row under [`NonFinitePolicy::Error`];
/// rows before it have been charged and added.
pub fn clip_block(
    rows: &[f32],
    p: usize,
    slots: &mut [&mut LedgerSlot<'_>],
    clip: f64,
    policy: NonFinitePolicy,
    acc: &mut [f32],
    stats: &mut BlockStats,
) -> Result<(), usize> {
    const GROUP: usize = 8;
    for (g, (rows, slots)) in rows.chunks(GROUP * p).zip(slots.chunks_mut(GROUP)).enumerate() {
        let mut w = [0.0f32; GROUP];
        for (k, (row, slot)) in rows.chunks_exact(p).zip(slots.iter_mut()).enumerate() {
            let (f, out) = clip_factor(row, slot, clip, policy).map_err(|_| g * GROUP + k)?;
            w[k] = f;
            stats.rows += 1;
            stats.skipped_nonfinite += usize::from(out.norm.is_nan());
        }
        weighted_sum(rows, p, &w[..slots.len()], acc);
    }
    Ok(())
}

/// The grid step for discrete-Gaussian noise with clip `clip` and `p` parameters: a power of
/// two at most 2·10⁻³·C/√p, so that rounding a clipped gradient onto the grid moves it by at
/// most √p·γ/2 ≤ 10⁻³·C.
#[must_use]
pub fn grid_step(clip: f64, p: usize) -> f64 {
    let target = 2e-3 * clip / (p.max(1) as f64).sqrt();
    2f64.powi(target.log2().floor() as i32)
}

/// The grid form of [`clip_block`] (for discrete-Gaussian noise): each row is clipped to
/// `√granted − √p·γ/2` and rounded coordinate-wise to the nearest multiple of `gamma`, so the
/// rounded vector — what the example contributes, added to `acc` in units of `gamma` — has norm
/// at most √granted: ‖round(v)‖ ≤ ‖v‖ + √p/2 grid units.
///
/// # Errors
/// As [`clip_block`].
#[allow(clippy::too_many_arguments)]
pub fn clip_block_grid(
    rows: &[f32],
    p: usize,
    slots: &mut [&mut LedgerSlot<'_>],
    clip: f64,
    policy: NonFinitePolicy,
    gamma: f64,
    acc: &mut [i64],
    stats: &mut BlockStats,
) -> Result<(), usize> {
    let half_diagonal = (p as f64).sqrt() * gamma / 2.0;
    for (k, (row, slot)) in rows.chunks_exact(p).zip(slots.iter_mut()).enumerate() {
        let sq = squared_norm(row);
        stats.rows += 1;
        if !sq.is_finite() {
            match policy {
                NonFinitePolicy::Error => return Err(k),
                NonFinitePolicy::Skip => {
                    slot.grant(clip * clip);
                    stats.skipped_nonfinite += 1;
                    continue;
                }
            }
        }
        if sq == 0.0 {
            continue;
        }
        let granted = slot.grant(sq.min(clip * clip));
        let room = granted.sqrt() - half_diagonal;
        if room <= 0.0 {
            continue;
        }
        // In grid units; f64 products carry ~1e-16 relative error, far inside the shrink.
        let f = room / sq.sqrt() * FACTOR_SHRINK / gamma;
        for (a, &x) in acc.iter_mut().zip(row) {
            *a += (f64::from(x) * f).round() as i64;
        }
    }
    Ok(())
}

/// `acc += Σᵣ w[r] · rows[r]` for `w.len()` rows of length `p`, skipping rows with weight 0
/// (so a zero weight on a NaN row adds nothing). Works in column blocks that stay in L1, so
/// `acc` is read and written once per call and every row is read once.
pub fn weighted_sum(rows: &[f32], p: usize, w: &[f32], acc: &mut [f32]) {
    const BLOCK: usize = 512;
    debug_assert!(rows.len() >= w.len() * p && acc.len() == p);
    for start in (0..p).step_by(BLOCK) {
        let end = (start + BLOCK).min(p);
        let a = &mut acc[start..end];
        for (r, &wr) in w.iter().enumerate() {
            if wr == 0.0 {
                continue;
            }
            for (y, &v) in a.iter_mut().zip(&rows[r * p + start..r * p + end]) {
                *y += wr * v;
            }
        }
    }
}

/// Σ x² with exact f32 products accumulated in eight f64 lanes (vectorises to AVX-512/AVX2);
/// relative error ~1e-12. Infinite or NaN for a row with a non-finite entry.
#[must_use]
pub fn squared_norm(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            let v = f64::from(v);
            *l += v * v;
        }
    }
    lanes.iter().sum::<f64>() + tail.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>()
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

    /// Runs the kernel over all rows of `grads` against `ledger`.
    fn kernel(
        grads: &[f32],
        p: usize,
        ledger: &mut IndividualFilter,
        clip: f64,
        policy: NonFinitePolicy,
    ) -> Result<Vec<f32>, usize> {
        use rayon::iter::ParallelIterator;
        let n = grads.len() / p;
        let mut owned: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..n).collect();
        let mut refs: Vec<&mut LedgerSlot<'_>> = owned.iter_mut().collect();
        let mut acc = vec![0.0f32; p];
        clip_block(grads, p, &mut refs, clip, policy, &mut acc, &mut BlockStats::default())?;
        Ok(acc)
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
        for step in 0..5 {
            let grads: Vec<f32> =
                (0..n * p).map(|i| (((i * 31 + step * 7) % 97) as f32 - 48.0) / (40.0 + (i / p) as f32)).collect();
            let want = reference(&grads, p, &mut spent, budget, clip);
            let got = kernel(&grads, p, &mut ledger, clip, NonFinitePolicy::Skip).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()), "step {step}: {g} vs {w}");
            }
            for (i, want) in spent.iter().enumerate() {
                assert!((ledger.spent(i) - want).abs() <= 1e-9, "ledger of {i}");
                assert!(ledger.spent(i) <= budget);
            }
        }
        assert!(ledger.active_count_non_private() < n, "some examples must run out in 5 steps at budget 2.5");
    }

    #[test]
    fn a_non_finite_row_contributes_nothing_and_is_charged() {
        let p = 2;
        let grads = [0.0, 0.0, f32::NAN, 1.0, 3.0, 4.0, f32::INFINITY, 0.0];
        let mut ledger = IndividualFilter::new(4, 4.0).unwrap();
        assert_eq!(kernel(&grads, p, &mut ledger, 1.0, NonFinitePolicy::Error).unwrap_err(), 1);
        let mut ledger = IndividualFilter::new(4, 4.0).unwrap();
        let sum = kernel(&grads, p, &mut ledger, 1.0, NonFinitePolicy::Skip).unwrap();
        assert!(sum.iter().all(|v| v.is_finite()), "a skipped row poisoned the sum: {sum:?}");
        assert_eq!(ledger.spent(0), 0.0, "a zero gradient costs nothing");
        assert_eq!(ledger.spent(1), 1.0, "a skipped non-finite example is charged the worst case C²");
        assert_eq!(ledger.spent(3), 1.0);
        assert!((sum[0] - 0.6).abs() < 1e-5 && (sum[1] - 0.8).abs() < 1e-5, "only the finite example contributes");
    }

    /// ‖fl(f·x)‖ in f64, as the kernel adds it.
    fn contributed_norm(row: &[f32], f: f32) -> f64 {
        row.iter().map(|&v| f64::from(f * v).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn contributed_norm_never_exceeds_the_charge_at_extreme_magnitudes() {
        // Entries near f32::MAX at a small clip: the factor is subnormal in f32, where rounding
        // to nearest can add 0.1 % to what an example contributes.
        for row in [vec![f32::MAX], vec![f32::MAX * 0.9; 7], vec![-3.1e38, 2.9e38, 1.0]] {
            for clip in [1.0, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-20] {
                let mut ledger = IndividualFilter::new(1, 5.0).unwrap();
                let (f, out) = clip_factor(&row, &mut ledger.slot_mut(0), clip, NonFinitePolicy::Skip).unwrap();
                let ratio = contributed_norm(&row, f) / out.granted.sqrt();
                assert!(ratio <= 1.0, "clip {clip}, row {row:?}: contributed / charged = {ratio}");
            }
        }
    }

    #[test]
    fn grid_contributions_never_exceed_the_charge() {
        let p = 26_010;
        let gamma = grid_step(1.0, p);
        assert!((p as f64).sqrt() * gamma / 2.0 <= 1e-3 && gamma.log2().fract() == 0.0);
        let row: Vec<f32> = (0..p).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        for budget in [5.0, 0.3, 1e-3, 1e-7] {
            let mut ledger = IndividualFilter::new(1, budget).unwrap();
            let mut slot = ledger.slot_mut(0);
            let mut acc = vec![0i64; p];
            let mut stats = BlockStats::default();
            clip_block_grid(&row, p, &mut [&mut slot], 1.0, NonFinitePolicy::Skip, gamma, &mut acc, &mut stats)
                .unwrap();
            let norm = acc.iter().map(|&v| (v as f64 * gamma).powi(2)).sum::<f64>().sqrt();
            let charged = ledger.spent(0);
            assert!(norm <= charged.sqrt(), "budget {budget}: {norm} > {}", charged.sqrt());
            assert!(norm >= charged.sqrt() - 2e-3, "budget {budget}: the grid wastes too much: {norm}");
        }
    }

    proptest! {
        /// For any finite row, clip and remaining budget, what an example adds is at most what it was charged.
        #[test]
        fn contributed_norm_never_exceeds_the_charge(
            mant in proptest::collection::vec(-1.0f32..1.0, 1..40),
            exps in proptest::collection::vec(-149i32..128, 1..40),
            log_clip in -40f64..40.0,
            log_budget in -60f64..60.0,
        ) {
            let row: Vec<f32> = mant.iter().zip(exps.iter().cycle()).map(|(m, &e)| {
                let v = f64::from(*m) * 2f64.powi(e);
                (v.clamp(-f64::from(f32::MAX), f64::from(f32::MAX))) as f32
            }).collect();
            let mut ledger = IndividualFilter::new(1, 10f64.powf(log_budget)).unwrap();
            let clip = 10f64.powf(log_clip);
            let (f, out) = clip_factor(&row, &mut ledger.slot_mut(0), clip, NonFinitePolicy::Skip).unwrap();
            prop_assert!(contributed_norm(&row, f) <= out.granted.sqrt(), "{} > {}", contributed_norm(&row, f), out.granted.sqrt());
            prop_assert!(out.granted <= clip * clip * (1.0 + 1e-15));
        }
    }
}
