//! The clipping kernel of 001 Algorithm 3, the training hot path.
//!
//! For each example: ‖gᵢ‖², the ledger grant c² = min(‖gᵢ‖², C², B_norm − spentᵢ) (charged
//! before anything is released) and the factor √(c²)/‖gᵢ‖ ([`clip_factor`]); then the clipped
//! sum Σ factorᵢ·gᵢ of a group of examples as one weighted reduction ([`weighted_sum`]) while
//! their rows are still in cache.
//!
//! The squared norm accumulates exact f32 products in f64 lanes, so its relative error is
//! ~1e-12; the factor is then shrunk by [`SAFETY`] so that the f32 vector actually added has
//! norm at most √(granted) despite f32 rounding: what the ledger records is never less than
//! what an example contributed.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::accounting::filter::LedgerSlot;

/// Relative shrink of every clip factor (2⁻²⁰ ≈ 1e-6), covering the f32 rounding of the
/// scaled gradient (≤ 2⁻²⁴ relative) and of its norm with a wide margin.
pub const SAFETY: f64 = 1.0 - 1.0 / (1u64 << 20) as f64;

/// What to do with an example whose gradient is NaN or infinite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonFinitePolicy {
    /// Stop with an error before the step releases anything (default).
    #[default]
    Error,
    /// Drop the example from this step, charging it the worst case min(C², remaining).
    Skip,
}

/// One example's outcome (non-private diagnostics; never released by default).
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
/// c² = min(‖gᵢ‖², C², remaining) and returns the factor by which the row enters the clipped
/// sum (√(c²)/‖gᵢ‖, shrunk by [`SAFETY`]; 0 for a zero, skipped or exhausted example).
///
/// ```
/// use dpgd::accounting::filter::IndividualFilter;
/// use dpgd::clip::{clip_factor, weighted_sum, NonFinitePolicy};
/// let mut ledger = IndividualFilter::new(1, 2.0).unwrap(); // B_norm = 2, C = 1
/// let row = [3.0f32, 4.0];
/// let (f, out) = clip_factor(&row, &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Error).unwrap();
/// assert_eq!(out.norm, 5.0);
/// assert_eq!(out.granted, 1.0); // clipped to C
/// let mut acc = vec![0.0f32; 2];
/// weighted_sum(&row, 2, &[f], &mut acc);
/// assert!((acc[0] - 0.6).abs() < 1e-5 && (acc[1] - 0.8).abs() < 1e-5);
/// ```
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
    let factor = if granted > 0.0 { ((granted / sq).sqrt() * SAFETY) as f32 } else { 0.0 };
    Ok((factor, ClipOutcome { norm: sq.sqrt(), granted }))
}

/// `acc += Σᵣ w[r] · rows[r]` for `w.len()` rows of length `p`: the clipped sum as one
/// weighted reduction. Works in column blocks that stay in L1, so `acc` is read and written
/// once per call and every row is read once.
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

/// The clipping kernel over a `[n × p]` buffer of per-example gradients, parallel over
/// contiguous groups of examples (one per worker, summed in order): returns the clipped sum
/// and each example's outcome, or the index of the first non-finite gradient under
/// [`NonFinitePolicy::Error`].
pub fn clip_sum<'a>(
    grads: &[f32],
    p: usize,
    slots: impl IndexedParallelIterator<Item = LedgerSlot<'a>>,
    clip: f64,
    policy: NonFinitePolicy,
) -> Result<(Vec<f32>, Vec<ClipOutcome>), usize> {
    const GROUP: usize = 8;
    let n = grads.len() / p;
    let mut slots: Vec<LedgerSlot<'a>> = slots.collect();
    let per = n.div_ceil(rayon::current_num_threads()).max(1);
    let groups: Vec<(Vec<f32>, Vec<ClipOutcome>, Option<usize>)> = grads
        .par_chunks(per * p)
        .zip(slots.par_chunks_mut(per))
        .map(|(rows, slots)| {
            let mut acc = vec![0.0f32; p];
            let mut outs = Vec::with_capacity(slots.len());
            for (g, (rows, slots)) in rows.chunks(GROUP * p).zip(slots.chunks_mut(GROUP)).enumerate() {
                let mut w = [0.0f32; GROUP];
                for (k, (row, slot)) in rows.chunks_exact(p).zip(slots.iter_mut()).enumerate() {
                    match clip_factor(row, slot, clip, policy) {
                        Ok((f, o)) => {
                            w[k] = f;
                            outs.push(o);
                        }
                        Err(_) => return (acc, outs, Some(g * GROUP + k)),
                    }
                }
                weighted_sum(rows, p, &w[..slots.len()], &mut acc);
            }
            (acc, outs, None)
        })
        .collect();
    let mut sum = vec![0.0f32; p];
    let mut outcomes = Vec::with_capacity(n);
    for (i, (acc, outs, failed)) in groups.into_iter().enumerate() {
        if let Some(k) = failed {
            return Err(i * per + k);
        }
        axpy(1.0, &acc, &mut sum);
        outcomes.extend(outs);
    }
    Ok((sum, outcomes))
}

/// Σ x² with exact f32 products accumulated in eight f64 lanes (vectorises to AVX-512/AVX2);
/// relative error ~1e-12.
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
            let (got, outs) = clip_sum(&grads, p, ledger.slots_mut(0..n), clip, NonFinitePolicy::Error).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()), "step {step}: {g} vs {w}");
            }
            for i in 0..n {
                assert!((ledger.spent(i) - spent[i]).abs() <= 1e-9, "ledger of {i}");
                assert!(ledger.spent(i) <= budget);
                assert!(outs[i].granted <= clip * clip);
            }
        }
        assert!(ledger.active_count_non_private() < n, "some examples must run out in 5 steps at budget 2.5");
    }

    #[test]
    fn contributed_norm_never_exceeds_the_charge() {
        let mut ledger = IndividualFilter::new(1, 0.3).unwrap();
        let row: Vec<f32> = (0..10_000).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let mut acc = vec![0.0f32; row.len()];
        let (f, out) = clip_factor(&row, &mut ledger.slot_mut(0), 1.0, NonFinitePolicy::Error).unwrap();
        weighted_sum(&row, row.len(), &[f], &mut acc);
        assert!((out.granted - 0.3).abs() < 1e-15);
        assert!(squared_norm(&acc) <= out.granted, "{} > {}", squared_norm(&acc), out.granted);
    }

    #[test]
    fn zero_and_non_finite_gradients_are_handled_explicitly() {
        let mut ledger = IndividualFilter::new(3, 4.0).unwrap();
        let p = 2;
        let grads = [0.0, 0.0, f32::NAN, 1.0, 3.0, 4.0];
        assert_eq!(clip_sum(&grads, p, ledger.slots_mut(0..3), 1.0, NonFinitePolicy::Error).unwrap_err(), 1);
        let mut ledger = IndividualFilter::new(3, 4.0).unwrap();
        let (sum, outs) = clip_sum(&grads, p, ledger.slots_mut(0..3), 1.0, NonFinitePolicy::Skip).unwrap();
        assert_eq!(outs[0].granted, 0.0, "a zero gradient costs nothing");
        assert_eq!(ledger.spent(0), 0.0);
        assert_eq!(ledger.spent(1), 1.0, "a skipped non-finite example is charged the worst case C²");
        assert!((sum[0] - 0.6).abs() < 1e-5 && (sum[1] - 0.8).abs() < 1e-5, "only the finite example contributes");
    }
}
