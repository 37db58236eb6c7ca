//! A micro-batch's gradient rows as the clip reads them: the values an engine wrote, except for
//! blocks it leaves as outer products of two short vectors (a fully connected layer's weight
//! gradient ∂ℓᵢ/∂W = δᵢ aᵢᵀ), which the clip multiplies out itself while it adds them to the sum,
//! so that the largest part of a row is never written to memory and read back.

use std::ops::Range;

use super::{FACTOR_BITS, MAGIC_BITS, rounded_bits, squared_norm};

/// A block of every row of a micro-batch given by two factors instead of its values:
/// coordinate (o, i) of row r's block (row-major `[dout, din]`) is the exact product
/// δᵣₒ·aᵣᵢ of two f32 values. The product is exact in f64 (two 24-bit significands make at
/// most 48 bits, and no product of f32 values leaves f64's normal range), so the row an example
/// adds is defined without a rounding of its own.
#[derive(Debug, Clone, Copy)]
pub struct Outer<'a> {
    /// Where the block starts in a row (θ's layout).
    pub at: usize,
    /// Rows of the block.
    pub dout: usize,
    /// Columns of the block.
    pub din: usize,
    /// δ of every row of the micro-batch, `dout` values each (row r's first at `r·dout`).
    pub delta: &'a [f32],
    /// a of every row of the micro-batch, `din` values each.
    pub input: &'a [f32],
}

impl Outer<'_> {
    /// Values in the block: dout·din.
    #[must_use]
    pub fn len(&self) -> usize {
        self.dout * self.din
    }

    /// Whether the block has no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row r's factors (δᵣ, aᵣ).
    fn factors(&self, r: usize) -> (&[f32], &[f32]) {
        (&self.delta[r * self.dout..(r + 1) * self.dout], &self.input[r * self.din..(r + 1) * self.din])
    }

    /// Row r's block's squared norm from its factors alone: Σₒᵢ(δₒaᵢ)² = ‖δ‖²·‖a‖² (see
    /// [`outer_squared_norm`]).
    #[must_use]
    pub fn squared_norm(&self, r: usize) -> f64 {
        let (d, a) = self.factors(r);
        outer_squared_norm(d, a)
    }
}

/// The squared norm of the outer product δ aᵀ (exact products) from its factors: ‖δ‖²·‖a‖² in
/// f64, O(dout + din) work instead of O(dout·din). Each factor's sum of exact squares is within
/// (len − 1)·2⁻⁵³ relative of its exact value ([`squared_norm`]) and the product rounds once:
/// within (dout + din − 1)·2⁻⁵³ (to first order) of the block's exact squared norm, no more than
/// any f64 sum of its dout·din squares (dout + din − 1 ≤ dout·din), so [`super::FACTOR_SHRINK`]
/// covers it as it covers a sum over written values. Non-finite if a factor has a non-finite
/// value (0·∞ included).
#[must_use]
pub fn outer_squared_norm(delta: &[f32], input: &[f32]) -> f64 {
    squared_norm(delta) * squared_norm(input)
}

/// A micro-batch's gradient rows: row r is `values[r·p..(r+1)·p]` except inside each
/// [`Outer`] block, whose values are the exact products of the block's factors (and whose
/// place in `values` is never read).
#[derive(Debug, Clone)]
pub struct Rows<'a> {
    values: &'a [f32],
    p: usize,
    /// In order of `at`, not overlapping, each inside the row.
    outer: Vec<Outer<'a>>,
}

impl<'a> Rows<'a> {
    /// Rows of `p` values each, all written.
    #[must_use]
    pub fn dense(values: &'a [f32], p: usize) -> Self {
        Self { values, p, outer: Vec::new() }
    }

    /// Rows of `p` values with `outer` blocks given by their factors.
    ///
    /// # Panics
    /// If a block leaves the row or overlaps another, or its factors are shorter than the rows
    /// `values` holds: the engine that made them is broken (nothing here comes from input).
    #[must_use]
    pub fn with_outer(values: &'a [f32], p: usize, mut outer: Vec<Outer<'a>>) -> Self {
        outer.retain(|o| !o.is_empty());
        outer.sort_by_key(|o| o.at);
        let rows = values.len().checked_div(p).unwrap_or(0);
        let mut end = 0;
        for o in &outer {
            assert!(o.at >= end && o.at + o.len() <= p, "outer block at {} overlaps or leaves the row", o.at);
            assert!(o.delta.len() >= rows * o.dout && o.input.len() >= rows * o.din, "outer factors for {rows} rows");
            end = o.at + o.len();
        }
        Self { values, p, outer }
    }

    /// Values per row.
    #[must_use]
    pub fn p(&self) -> usize {
        self.p
    }

    /// The outer blocks, in order.
    #[must_use]
    pub fn outer(&self) -> &[Outer<'a>] {
        &self.outer
    }

    /// Coordinate j of row r: the written value, or the exact product inside an outer block.
    ///
    /// # Panics
    /// If `j ≥ p` or row r is not in the micro-batch.
    #[must_use]
    pub fn value(&self, r: usize, j: usize) -> f64 {
        assert!(j < self.p, "coordinate {j} of a row of {}", self.p);
        match self.outer.iter().find(|o| (o.at..o.at + o.len()).contains(&j)) {
            Some(o) => {
                let (d, a) = o.factors(r);
                f64::from(d[(j - o.at) / o.din]) * f64::from(a[(j - o.at) % o.din])
            }
            None => f64::from(self.values[r * self.p + j]),
        }
    }

    /// Row r as the clip reads it, into `out` (`p` values): the written values, and inside each
    /// outer block the exact products of its factors.
    ///
    /// # Panics
    /// If `out` does not have `p` values or row r is not in the micro-batch.
    pub fn read_row(&self, r: usize, out: &mut [f64]) {
        assert_eq!(out.len(), self.p, "a row has {} values", self.p);
        for cols in self.written() {
            let values = &self.values[r * self.p..][cols.clone()];
            out[cols].iter_mut().zip(values).for_each(|(o, &v)| *o = f64::from(v));
        }
        for o in &self.outer {
            let (d, a) = o.factors(r);
            for (block, &dv) in out[o.at..o.at + o.len()].chunks_exact_mut(o.din).zip(d) {
                block.iter_mut().zip(a).for_each(|(x, &av)| *x = f64::from(dv) * f64::from(av));
            }
        }
    }

    /// The column ranges of the written values (between the outer blocks).
    fn written(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let starts = std::iter::once(0).chain(self.outer.iter().map(|o| o.at + o.len()));
        let ends = self.outer.iter().map(|o| o.at).chain(std::iter::once(self.p));
        starts.zip(ends).filter(|(s, e)| s < e).map(|(s, e)| s..e)
    }

    /// Row r's squared norm, every value squared and added in f64 (the written ones exactly,
    /// each exact product's square rounded once): the reference an engine's norm is checked
    /// against (O(p); debug builds).
    #[must_use]
    pub fn squared_norm(&self, r: usize) -> f64 {
        let written: f64 = self.written().map(|c| squared_norm(&self.values[r * self.p..][c])).sum();
        let outer: f64 = self
            .outer
            .iter()
            .map(|o| {
                let (d, a) = o.factors(r);
                d.iter()
                    .map(|&dv| a.iter().map(|&av| (f64::from(dv) * f64::from(av)).powi(2)).sum::<f64>())
                    .sum::<f64>()
            })
            .sum();
        written + outer
    }

    /// Whether `sq` is row r's squared norm as far as rounding allows: within p·2⁻⁵² relative
    /// of [`squared_norm`](Self::squared_norm) (each within p·2⁻⁵³ of the exact value, see
    /// [`outer_squared_norm`]); both non-finite otherwise (the clip treats NaN and ∞ alike, and
    /// an outer block's ‖δ‖²‖a‖² is ∞ where its products ∞·0 are NaN). For debug checks of
    /// norms computed elsewhere.
    pub(crate) fn is_squared_norm_of(&self, r: usize, sq: f64) -> bool {
        let b = self.squared_norm(r);
        if !(sq.is_finite() && b.is_finite()) {
            return sq.is_finite() == b.is_finite();
        }
        (sq - b).abs() <= self.p as f64 * f64::EPSILON * sq.max(b)
    }

    /// `acc += Σ round(w · row r)` over the `live` rows (row, weight ≠ 0, at most
    /// [`FACTOR_BITS`] significant bits: a clip factor): the written values
    /// ([`super::add_rounded_columns`]) and each outer block ([`add_rounded_outer`]), every
    /// coordinate the exact product rounded once.
    pub(crate) fn add_rounded(&self, live: &[(usize, f64)], acc: &mut [i64]) {
        debug_assert!(acc.len() == self.p);
        for cols in self.written() {
            super::add_rounded_columns(self.values, self.p, live, cols.clone(), &mut acc[cols]);
        }
        for o in &self.outer {
            add_rounded_outer(o, live, &mut acc[o.at..o.at + o.len()]);
        }
    }
}

crate::simd::kernel! {
/// `acc += Σᵣ round(w · δᵣₒ·aᵣᵢ)` over one outer block (`acc` is the block, `[dout, din]`
/// row-major) for the `live` rows (row, weight): each coordinate rounded once, as a written
/// value is. The weights are clip factors of at most [`FACTOR_BITS`] significant bits, so
/// w·δᵣₒ is exact in f64 and one fused multiply-add (w·δᵣₒ)·aᵣᵢ + the rounding constant rounds
/// the exact value (where w·δᵣₒ falls below f64's normal range, |w·δ·a| < 2⁻⁸⁹⁰ rounds to 0
/// either way). Four rows at a time, their aᵣ converted to f64 once per column block (in L1):
/// a coordinate costs one fused multiply-add and one integer add per row, and no row is read
/// from memory. Every |w·δa| must be below 2⁵¹ (the clip factors are).
fn add_rounded_outer<'a>(o: &Outer<'a>, live: &[(usize, f64)], acc: &mut [i64]) {
    const BLOCK: usize = 256;
    let din = o.din;
    debug_assert!(live.iter().all(|&(_, w)| w.to_bits().trailing_zeros() >= 53 - FACTOR_BITS));
    if din == 0 {
        return;
    }
    let quads = live.chunks_exact(4);
    for &(r, w) in quads.remainder() {
        let (d, a) = o.factors(r);
        for (y, &dv) in acc.chunks_exact_mut(din).zip(d) {
            let wd = w * f64::from(dv);
            for (y, &av) in y.iter_mut().zip(a) {
                *y += rounded_bits(wd, f64::from(av)).wrapping_sub(MAGIC_BITS);
            }
        }
    }
    let mut a64 = [[0.0f64; BLOCK]; 4];
    for q in quads {
        let w = [q[0].1, q[1].1, q[2].1, q[3].1];
        let f = [o.factors(q[0].0), o.factors(q[1].0), o.factors(q[2].0), o.factors(q[3].0)];
        for start in (0..din).step_by(BLOCK) {
            let n = BLOCK.min(din - start);
            for (k, (_, a)) in f.iter().enumerate() {
                a64[k][..n].iter_mut().zip(&a[start..start + n]).for_each(|(x, &v)| *x = f64::from(v));
            }
            let [a0, a1, a2, a3] = [&a64[0][..n], &a64[1][..n], &a64[2][..n], &a64[3][..n]];
            for (row, k) in acc.chunks_exact_mut(din).zip(0..) {
                let wd = [0, 1, 2, 3].map(|m| w[m] * f64::from(f[m].0[k]));
                let y = &mut row[start..start + n];
                for ((((y, &x0), &x1), &x2), &x3) in y.iter_mut().zip(a0).zip(a1).zip(a2).zip(a3) {
                    // As in `add_rounded_columns`: the bit patterns added with wrapping
                    // arithmetic, the constant taken off once (the same integer).
                    let bits = rounded_bits(wd[0], x0)
                        .wrapping_add(rounded_bits(wd[1], x1))
                        .wrapping_add(rounded_bits(wd[2], x2))
                        .wrapping_add(rounded_bits(wd[3], x3));
                    *y += bits.wrapping_sub(MAGIC_BITS.wrapping_mul(4));
                }
            }
        }
    }
}
}
