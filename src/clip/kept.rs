//! The clip when an engine keeps its rows where it computed them (the burn engine's default on
//! every device): only each row's squared norm comes to the host, and only the micro-batch's
//! integer sum comes back. On the CPU backends (flex, ndarray) the device is the host, and
//! dpgd's host kernels run the same steps over the rows in host memory
//! ([`blocked_square_sum`] for step 1, the host clip's exact integer sum for steps 3–5).
//!
//! The device's arithmetic is f32 with an order of reduction nobody promises, and the exact sum
//! must still move by at most what each example was charged. The argument, step by step (u =
//! 2⁻²⁴, the unit roundoff of f32; every device operation below is an addition, a
//! multiplication, a rounding to an integer or a conversion, which Vulkan, WGSL, CUDA and the
//! CPU backends all do correctly rounded, except that they may flush subnormal values to zero):
//!
//! 1. **The norm is bounded above, whatever the order.** The device squares each value of a
//!    row (one rounding) and adds the squares in blocks of `k` values, then adds the blocks
//!    (any order inside either sum). Each square then passes through at most
//!    R = 1 + (k − 1) + (m − 1) roundings for m blocks, each a factor in [1 − u, 1 + u] on a
//!    non-negative quantity, so the device's sum ŝ ≥ (1 − u)ᴿ·s − a ≥ (1 − R·u)·s − a, where
//!    s is the exact Σxⱼ² and a = t·2⁻¹²⁵ for t values covers every square or partial sum
//!    flushed to zero below f32's normal range (each loses less than 2⁻¹²⁶). So
//!    s ≤ (ŝ + a)/(1 − R·u) ([`squared_norm_bound`]; k ≈ √t makes R ≈ 2√t: 357 roundings,
//!    2.1·10⁻⁵ relative, for the 26,010 values of an Opacus CNN row). A kernel that fuses the
//!    square into the block's sum (one fused multiply-add) rounds once fewer, within the bound;
//!    burn's kernel fusion (in dpgd's wgpu build) joins element-wise operations to a
//!    reduction's read or write but keeps each reduction over its own axis, so the blocks stay
//!    blocks. Which values form a block does not matter: dpgd's own kernel on wgpu
//!    (`crate::cube::block_square_sums`) adds every m-th value of a row into one block, so that
//!    neighbouring threads read neighbouring values, in m blocks of k values as before.
//!    A non-finite ŝ (a NaN or infinite value, or squares past f32's range) is non-finite: the
//!    example is charged the worst case and adds nothing.
//! 2. **The ledger charges the bound.** The clip (`clip_factor_of`) charges
//!    c² = min(bound, C², remaining) and gives the factor f = (√c² − √p·γ/2)·(1 − 2⁻²⁰)/(√bound·γ)
//!    in units of the device grid γ ([`DeviceGrid`]), so f·‖x‖ ≤ √c²/γ − √p/2 for the exact
//!    norm ‖x‖ ≤ √bound. A charge exceeds the host path's by the bound's margin only.
//! 3. **The device's products stay below f·x.** The factor is sent as an f32 rounded toward
//!    zero after a shrink of 2⁻²² ([`device_factor`]): f₃₂ ≤ f·(1 − 2⁻²²). The device's product
//!    x·f₃₂, rounded once, is at most |x|·f₃₂·(1 + u) < |x|·f (or flushed to 0). On the CPU
//!    backends the host kernel forms the exact product in f64 (two 24-bit significands), at
//!    most |x|·f₃₂ < |x|·f.
//! 4. **Rounding to the grid adds at most √p/2.** Each product is rounded to an integer, by at
//!    most ½ (round half to even; a conversion that truncates moves it less), and that integer
//!    converts exactly. So the row's integers q satisfy ‖q‖ ≤ f·‖x‖ + √p/2 ≤ √c²/γ: the row
//!    adds at most what its example was charged.
//! 5. **The integers are summed exactly.** Every |qⱼ| ≤ ‖q‖ ≤ C/γ, and the device grid is
//!    coarse enough that a micro-batch's sum of them stays below 2³⁰ in magnitude
//!    ([`DeviceGrid::new`]): the device's 32-bit integer sum does not overflow and is exact in
//!    any order. The host multiplies it by the power of two from the device grid to the run's
//!    sum grid (exact) and adds it to the run's 64-bit sum.
//!
//! The device path differs from the host path only by the norm's bound (each factor smaller
//! by at most the bound's relative margin) and by the coarser grid (each row's rounding at most
//! √p·γ_d/2 in norm, against √p·γ/2); a run on one device repeats bit for bit where the
//! device's reductions repeat their order.

use super::grid::SumGrid;

/// A micro-batch's gradient rows kept where an engine computed them (see the module's
/// argument), for the clip to add the live ones.
pub trait KeptRows {
    /// Values per row (P).
    fn p(&self) -> usize;
    /// Writes Σᵣ round(fᵣ·rowᵣ) into `sum` (P values) over the `live` rows (position in the
    /// micro-batch, f32 factor from [`device_factor`]), computed where the rows are: each
    /// product exact or in f32 rounded once, rounded to an integer by at most ½ and converted
    /// exactly, the integers added exactly (the factors keep the sum below 2³⁰:
    /// [`DeviceGrid`]). Rows not in `live` add nothing, whatever they hold (NaN included).
    /// A sum that cannot be read back adds nothing (its examples stay charged).
    fn sum_rounded(&mut self, live: &[(usize, f32)], sum: &mut [i64]);
}

/// The unit roundoff of f32 (2⁻²⁴).
const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// Values a device adds up in one block of a row's squared norm for a row part of `len` values:
/// the power of two nearest above √len (at least 1), so that a value's square passes through
/// about 2√len roundings ([`norm_roundings`]).
#[must_use]
pub fn norm_block(len: usize) -> usize {
    let root = (len.max(1) as f64).sqrt().ceil() as usize;
    root.next_power_of_two()
}

/// The most roundings a square passes through when a device squares `len` values and adds them
/// in blocks of `block` values, then adds the blocks' sums: the square itself, at most
/// `block − 1` additions in its block and `⌈len/block⌉ − 1` among the blocks.
#[must_use]
pub fn norm_roundings(len: usize, block: usize) -> usize {
    let block = block.max(1);
    1 + (block - 1) + (len.div_ceil(block).max(1) - 1)
}

crate::simd::kernel! {
/// A row's sum of squares as step 1 bounds it, computed on the host (the CPU backends' kept
/// rows, `crate::per_example::DeviceRows`): each square in f32 (one rounding), added in f32
/// within blocks of `block` consecutive values, then the blocks' sums added in order. Inside a
/// block the squares run in 16 lanes, then the lanes are added pairwise: a binary tree over the
/// block's values (lanes start at 0, and adding a zero is exact), so each square passes
/// through at most `block − 1` additions there, and through at most `⌈len/block⌉ − 1` among
/// the blocks: [`norm_roundings`]`(row.len(), block)` in all, which [`squared_norm_bound`]
/// covers. Non-finite for a row with a non-finite value or squares past f32's range.
#[must_use]
pub fn blocked_square_sum(row: &[f32], block: usize) -> f32 {
    const LANES: usize = 16;
    let mut total = 0.0f32;
    for values in row.chunks(block.max(1)) {
        let mut lanes = [0.0f32; LANES];
        let chunks = values.chunks_exact(LANES);
        let tail = chunks.remainder();
        for c in chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v * v;
            }
        }
        for (l, &v) in lanes.iter_mut().zip(tail) {
            *l += v * v;
        }
        total += crate::simd::pairwise_sum(lanes);
    }
    total
}
}

/// An upper bound of the exact Σxⱼ² of `len` f32 values from the device's f32 sum `device_sum`
/// of their squares, each square having passed through at most `roundings` roundings (see the
/// module's step 1): (ŝ + len·2⁻¹²⁵)/(1 − R·2⁻²⁴), raised by 2⁻⁵⁰ relative for this function's
/// own f64 operations. Non-finite (charged as a non-finite row) when `device_sum` is, or when
/// R·2⁻²⁴ ≥ ½, where no useful bound exists.
#[must_use]
pub fn squared_norm_bound(device_sum: f64, len: usize, roundings: usize) -> f64 {
    let relative = roundings as f64 * U32;
    if !(device_sum.is_finite() && device_sum >= 0.0) || relative >= 0.5 {
        return f64::INFINITY;
    }
    let flushed = len as f64 * 2f64.powi(-125);
    (device_sum + flushed) / (1.0 - relative) * (1.0 + 2f64.powi(-50))
}

/// The grid a device rounds a micro-batch's clipped rows onto: the run's sum grid made coarser
/// by a power of two until `batch` rows of norm at most C sum to below 2³⁰ grid units in each
/// coordinate (the module's step 5), so that a 32-bit integer sum on the device is exact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceGrid {
    grid: SumGrid,
    shift: u32,
}

/// The bound on a micro-batch's integer sum, in device grid units, per coordinate.
pub const DEVICE_SUM_LIMIT: f64 = (1u64 << 30) as f64;

impl DeviceGrid {
    /// The device grid for sums on `sum` of micro-batches of `batch` rows clipped to `clip`:
    /// γ_d = γ·2ˢ for the least s ≥ 0 with batch·C/γ_d ≤ 2³⁰. Public quantities only (the
    /// run's grid, its clip and its micro-batch size).
    #[must_use]
    pub fn new(sum: SumGrid, clip: f64, batch: usize) -> Self {
        let units = batch.max(1) as f64 * clip / sum.gamma();
        let mut shift = 0u32;
        // At most 1100 halvings: γ ≥ 2⁻¹⁰⁷⁴ and C·batch < 2¹⁰²⁴.
        while shift < 1100 && units / 2f64.powi(shift as i32) > DEVICE_SUM_LIMIT {
            shift += 1;
        }
        Self { grid: SumGrid { gamma: sum.gamma() * 2f64.powi(shift as i32) }, shift }
    }

    /// The grid the device rounds onto (the clip's factors are in its units).
    #[must_use]
    pub fn grid(self) -> SumGrid {
        self.grid
    }

    /// log₂ of γ_d/γ: a device integer v is v·2ˢ units of the run's grid.
    #[must_use]
    pub fn shift(self) -> u32 {
        self.shift
    }

    /// Adds a micro-batch's device sum (in device units) to the run's sum (in its grid's
    /// units): `acc[j] += sum[j]·2ˢ`, exact (the run's grid bounds the whole sum below 2⁵³
    /// units).
    pub fn add_to(self, sum: &[i64], acc: &mut [i64]) {
        for (a, &v) in acc.iter_mut().zip(sum) {
            *a += v << self.shift;
        }
    }
}

/// The f32 factor a device multiplies a row by for the clip's factor `f` (module step 3):
/// f·(1 − 2⁻²²) rounded toward zero to f32, so that the device's rounded product never exceeds
/// the exact f·x. 0 for f = 0.
#[must_use]
pub fn device_factor(f: f64) -> f32 {
    let shrunk = f * (1.0 - 2f64.powi(-22));
    let down = shrunk as f32;
    if f64::from(down) > shrunk { down.next_down() } else { down }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_bound_covers_any_order_of_an_f32_sum_of_squares() {
        // Adversarial: one large value then many small ones that a sequential f32 sum loses.
        let mut x = vec![1.0f32; 1 << 14];
        x[0] = 4096.0;
        let exact: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let mut seq = 0.0f32;
        for &v in &x {
            seq += v * v;
        }
        assert!(f64::from(seq) < exact, "the sequential f32 sum loses the small squares");
        let bound = squared_norm_bound(f64::from(seq), x.len(), x.len());
        assert!(bound >= exact, "{bound} < {exact}");
        // The blocked sum with its own (smaller) bound.
        let block = norm_block(x.len());
        let blocked: f32 = x.chunks(block).map(|c| c.iter().map(|&v| v * v).sum::<f32>()).sum();
        let bound = squared_norm_bound(f64::from(blocked), x.len(), norm_roundings(x.len(), block));
        assert!(bound >= exact && bound <= exact * (1.0 + 1e-4), "{bound} vs {exact}");
    }

    #[test]
    fn flushed_subnormal_squares_are_covered() {
        // Squares below f32's normal range, as a device that flushes them to zero sees them.
        let x = vec![1e-20f32; 1000];
        let exact: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        assert!(squared_norm_bound(0.0, x.len(), norm_roundings(1000, 32)) >= exact);
    }

    #[test]
    fn non_finite_sums_and_hopeless_depths_give_no_bound() {
        assert!(squared_norm_bound(f64::NAN, 4, 4).is_infinite());
        assert!(squared_norm_bound(f64::INFINITY, 4, 4).is_infinite());
        assert!(squared_norm_bound(1.0, 1 << 24, 1 << 23).is_infinite());
        assert!(squared_norm_bound(1.0, 1 << 24, norm_roundings(1 << 24, norm_block(1 << 24))).is_finite());
    }

    #[test]
    fn the_device_grid_keeps_a_batch_sum_below_two_to_the_thirty() {
        let sum = SumGrid::fixed_point(1.0, 60_000).unwrap();
        for batch in [1, 64, 1024, 4096] {
            let d = DeviceGrid::new(sum, 1.0, batch);
            assert!(batch as f64 / d.grid().gamma() <= DEVICE_SUM_LIMIT);
            // The least such power: half of it would overflow the limit.
            assert!(d.shift() == 0 || 2.0 * batch as f64 / d.grid().gamma() > DEVICE_SUM_LIMIT);
            assert_eq!(d.grid().gamma(), sum.gamma() * 2f64.powi(d.shift() as i32));
        }
        let mut acc = vec![5i64, -5];
        DeviceGrid { grid: sum, shift: 3 }.add_to(&[1, -2], &mut acc);
        assert_eq!(acc, [13, -21]);
    }

    proptest! {
        #[test]
        fn a_device_factor_never_exceeds_the_clip_factor(f in 0.0f64..1e30) {
            let d = device_factor(f);
            prop_assert!(f64::from(d) <= f * (1.0 - 2f64.powi(-22)));
            prop_assert!(f == 0.0 || f64::from(d) >= f * (1.0 - 2f64.powi(-21)) || f < 1e-37);
        }

        #[test]
        fn a_device_row_adds_at_most_its_charge(
            xs in prop::collection::vec(-1e3f32..1e3, 1..300),
            clip in 0.01f64..10.0,
            batch in 1usize..2048,
        ) {
            // Simulates the device: f32 squares summed in blocks, the bound, the factor, the f32
            // product rounded to an integer; the row's integers must have norm ≤ √granted/γ_d.
            let grid = DeviceGrid::new(SumGrid::fixed_point(clip, 50_000).unwrap(), clip, batch).grid();
            let block = norm_block(xs.len());
            let s: f32 = xs.chunks(block).map(|c| c.iter().map(|&v| v * v).sum::<f32>()).sum();
            let bound = squared_norm_bound(f64::from(s), xs.len(), norm_roundings(xs.len(), block));
            let granted = bound.min(clip * clip);
            let room = granted.sqrt() - (xs.len() as f64).sqrt() * grid.gamma() / 2.0;
            prop_assume!(room > 0.0 && bound > 0.0);
            let f = room / grid.gamma() * crate::clip::FACTOR_SHRINK / bound.sqrt();
            let f32f = device_factor(f);
            let q: Vec<f64> = xs.iter().map(|&x| f64::from((x * f32f).round_ties_even())).collect();
            let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            prop_assert!(norm <= granted.sqrt() / grid.gamma(), "{norm} > {}", granted.sqrt() / grid.gamma());
            prop_assert!(q.iter().all(|v| v.abs() * batch as f64 <= DEVICE_SUM_LIMIT));
        }
    }
}
