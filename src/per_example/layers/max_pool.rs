//! Max pooling over square windows: the forward pass records each output's arg-max, the input
//! gradient routes each output gradient there.

use super::Alloc;
use super::windows::Windows;
use super::{Backward, Forward, Needs, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// A compiled max pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool2d(pub Windows);

impl MaxPool2d {
    pub(crate) fn compile(
        spec: kinds::MaxPool2d,
        input: Shape,
        output: Shape,
        at: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        Windows::compile("max_pool2d", (spec.kernel, spec.stride), (input, output), at).map(Self)
    }
}

crate::simd::kernel! {
/// The pools of `b` examples ([`pool`]), compiled for AVX-512 and AVX2 ([`crate::simd`]).
fn pool_batch(p: &Windows, x: &[f32], out: &mut [f32], argmax: &mut [u32], b: usize) {
    let (n_in, n_out) = (p.in_len(), p.out_len());
    // The running maxima of one plane, flattened (see `pool_stride1`).
    let flat = if p.stride == 1 && p.k > 1 { p.hin * p.win } else { 0 };
    let (mut best_v, mut best) = (vec![0.0f32; flat], vec![0u32; flat]);
    for e in 0..b {
        let (x, out, argmax) =
            (&x[e * n_in..(e + 1) * n_in], &mut out[e * n_out..(e + 1) * n_out], &mut argmax[e * n_out..(e + 1) * n_out]);
        if flat > 0 {
            pool_stride1(p, x, out, argmax, (&mut best_v, &mut best));
        } else {
            pool(p, x, out, argmax);
        }
    }
}
}

/// [`pool`] for stride 1 (and a window of at least 2), the same values and arg-maxes: the
/// window offsets but the last are applied to each plane as one flat vector (output position
/// (oh, ow) at oh·win + ow; positions with ow ≥ wout are computed and ignored), so the
/// compare-and-select runs over the whole plane rather than over rows of a few values; the
/// last offset writes each output row.
#[inline(always)]
fn pool_stride1(p: &Windows, x: &[f32], out: &mut [f32], argmax: &mut [u32], scratch: (&mut [f32], &mut [u32])) {
    let Windows { c, k, hin, win, hout, wout, .. } = *p;
    debug_assert!(hout > 0 && wout > 0, "a compiled pool has at least one output");
    // The last output position is (hout−1)·win + wout − 1; its window ends at hin·win − 1.
    let flat = (hout - 1) * win + wout;
    let (best_v, best) = (&mut scratch.0[..flat], &mut scratch.1[..flat]);
    let last = (k - 1) * win + (k - 1);
    for ch in 0..c {
        let base = ch * hin * win;
        let plane = &x[base..base + hin * win];
        for i in 0..k {
            for j in 0..k {
                let off = i * win + j;
                if off != last {
                    select_row(best_v, best, &plane[off..off + flat], (base + off) as u32, off == 0);
                }
            }
        }
        for oh in 0..hout {
            let (q, o) = (oh * win, (ch * hout + oh) * wout);
            let row = &plane[q + last..q + last + wout];
            let (bv, bi) = (&best_v[q..q + wout], &best[q..q + wout]);
            let (ov, oi) = (&mut out[o..o + wout], &mut argmax[o..o + wout]);
            for (ow, ((((ov, oi), &v), &bv), &bi)) in
                ov.iter_mut().zip(oi.iter_mut()).zip(row).zip(bv).zip(bi).enumerate()
            {
                let take = v > bv;
                *ov = if take { v } else { bv };
                *oi = if take { (base + q + last + ow) as u32 } else { bi };
            }
        }
    }
}

/// One example's pool, recording the arg-max input index of each output: the first
/// largest value of the window in row-major order (a later value replaces the best only if
/// strictly larger, so a NaN never does, and a NaN first in its window stays).
///
/// The window's offsets are the outer loops and the output row the inner one, so that the
/// compare-and-select over a row vectorises (the batch kernel takes [`pool_stride1`] at stride 1,
/// and on a processor with AVX-512 the layer takes `avx512::pool_batch` at stride 1 instead).
#[inline(always)]
fn pool(p: &Windows, x: &[f32], out: &mut [f32], argmax: &mut [u32]) {
    let Windows { c, k, stride: s, hin, win, hout, wout } = *p;
    for ch in 0..c {
        let base = ch * hin * win;
        let plane = &x[base..base + hin * win];
        for oh in 0..hout {
            let o = (ch * hout + oh) * wout;
            let (best_v, best) = (&mut out[o..o + wout], &mut argmax[o..o + wout]);
            for i in 0..k {
                for j in 0..k {
                    // Fits: Network::new keeps every activation below 2^40 values per
                    // example, and the arg-max indexes one example's input.
                    let start = (oh * s + i) * win + j;
                    let first = i == 0 && j == 0;
                    if s == 1 {
                        select_row(best_v, best, &plane[start..start + wout], (base + start) as u32, first);
                    } else {
                        for (ow, (bv, bi)) in best_v.iter_mut().zip(best.iter_mut()).enumerate() {
                            let at = start + ow * s;
                            let v = plane[at];
                            if first || v > *bv {
                                (*bv, *bi) = (v, (base + at) as u32);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `best_v[ow] = row[ow]` (with index `start + ow`) where `first` or `row[ow] > best_v[ow]`:
/// branch-free, so it vectorises.
#[inline(always)]
fn select_row(best_v: &mut [f32], best: &mut [u32], row: &[f32], start: u32, first: bool) {
    for (ow, ((bv, bi), &v)) in best_v.iter_mut().zip(best.iter_mut()).zip(row).enumerate() {
        let take = first || v > *bv;
        *bv = if take { v } else { *bv };
        *bi = if take { start + ow as u32 } else { *bi };
    }
}

/// The input gradients of `b` examples, overwritten: each output gradient added to its
/// window's arg-max, outputs in order.
fn unpool_batch(p: &Windows, argmax: &[u32], dy: &[f32], dx: &mut [f32], b: usize) {
    let (n_in, n_out) = (p.in_len(), p.out_len());
    dx[..b * n_in].iter_mut().for_each(|v| *v = 0.0);
    for e in 0..b {
        let dxe = &mut dx[e * n_in..(e + 1) * n_in];
        for (&i, &d) in argmax[e * n_out..(e + 1) * n_out].iter().zip(&dy[e * n_out..(e + 1) * n_out]) {
            dxe[i as usize] += d;
        }
    }
}

/// The pool at stride 1 in AVX-512 intrinsics: each output row in masked 16-wide vectors (a
/// row of 13 outputs is one vector; compiled loops over so short a row run scalar). The same
/// values and arg-maxes as the portable kernel, bit for bit (tested). The input gradient of an
/// input row of 8 to 16 values is one register per row (`unpool_batch`); narrower rows (the
/// Opacus CNN's second pool, 5 wide) stay with the portable scatter, where most of a vector
/// would be masked out. Measured on the Opacus CNN: an earlier gather over each input's windows
/// with masked loads at shifted addresses was 2.3× (pool 1) to 6.5× (pool 2) slower than the
/// scatter; shifting the output rows in registers instead is 1.3× faster (pool 1).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512i, _CMP_GT_OQ, _mm512_add_epi32, _mm512_mask_add_ps, _mm512_mask_blend_epi32, _mm512_mask_blend_ps,
        _mm512_mask_cmp_ps_mask, _mm512_mask_cmpeq_epi32_mask, _mm512_mask_storeu_epi32, _mm512_mask_storeu_ps,
        _mm512_maskz_loadu_epi32, _mm512_maskz_loadu_ps, _mm512_permutexvar_ps, _mm512_set1_epi32, _mm512_setr_epi32,
        _mm512_setzero_ps, _mm512_sub_epi32,
    };

    use super::Windows;
    use crate::simd::first_lanes;

    /// 0, 1, …, 15 plus `start` (indices wrap as the portable kernels' `as u32` casts do).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn iota(start: usize) -> __m512i {
        _mm512_add_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(start as i32),
        )
    }

    /// The pools of `b` examples at stride 1, recording each output's arg-max: the first
    /// strictly largest value of its window in row-major order (a NaN never replaces, a NaN
    /// first stays: the comparison is ordered).
    pub(super) fn pool_batch(p: &Windows, x: &[f32], out: &mut [f32], argmax: &mut [u32], b: usize) {
        let (n_in, n_out) = (p.in_len(), p.out_len());
        assert!(p.stride == 1 && p.hout + p.k == p.hin + 1 && p.wout + p.k == p.win + 1 && crate::simd::has_avx512f());
        assert!(x.len() >= b * n_in && out.len() >= b * n_out && argmax.len() >= b * n_out);
        for e in 0..b {
            let (x, out, argmax) = (
                &x[e * n_in..(e + 1) * n_in],
                &mut out[e * n_out..(e + 1) * n_out],
                &mut argmax[e * n_out..(e + 1) * n_out],
            );
            // SAFETY: AVX-512F is present; the slices hold example e (checked above).
            unsafe {
                match p.k {
                    2 => pool::<2>(p, x, out, argmax),
                    3 => pool::<3>(p, x, out, argmax),
                    _ => pool::<0>(p, x, out, argmax),
                }
            }
        }
    }

    /// Whether [`unpool_batch`] takes `p`: stride 1, and an input row that fills most of one
    /// vector (8 to 16 values; the Opacus CNN's first pool, 14 wide).
    pub(super) fn unpools(p: &Windows) -> bool {
        p.stride == 1 && (8..=16).contains(&p.win) && crate::simd::has_avx512f()
    }

    /// The input gradients of `b` examples, overwritten, for a pool [`unpools`] takes: the same
    /// sums as the portable scatter (`super::unpool_batch`), bit for bit (tested).
    ///
    /// Each input row is one vector, its sums kept in registers: for each window offset (i, j),
    /// from the last to the first (so that every input receives its terms in output order),
    /// output row r − i's gradients are shifted j lanes to the right and added where that
    /// output's arg-max is this input. The scatter instead adds each output to memory in turn,
    /// and at stride 1 neighbouring windows often share their arg-max: each add then waits on
    /// the one before it.
    pub(super) fn unpool_batch(p: &Windows, argmax: &[u32], dy: &[f32], dx: &mut [f32], b: usize) {
        let (n_in, n_out) = (p.in_len(), p.out_len());
        assert!(unpools(p) && p.hout + p.k == p.hin + 1 && p.wout + p.k == p.win + 1, "unpool: geometry {p:?}");
        assert!(argmax.len() >= b * n_out && dy.len() >= b * n_out && dx.len() >= b * n_in, "unpool: sizes");
        for e in 0..b {
            let (argmax, dy, dx) = (
                &argmax[e * n_out..(e + 1) * n_out],
                &dy[e * n_out..(e + 1) * n_out],
                &mut dx[e * n_in..(e + 1) * n_in],
            );
            // SAFETY: AVX-512F is present (`unpools`); the slices hold example e (checked above).
            unsafe {
                match p.k {
                    2 => unpool::<2>(p, argmax, dy, dx),
                    3 => unpool::<3>(p, argmax, dy, dx),
                    _ => unpool::<0>(p, argmax, dy, dx),
                }
            }
        }
    }

    /// One example's input gradient (see [`unpool_batch`]), for windows of `K = p.k` (or any
    /// size for `K = 0`).
    #[target_feature(enable = "avx512f")]
    fn unpool<const K: usize>(p: &Windows, argmax: &[u32], dy: &[f32], dx: &mut [f32]) {
        let Windows { c, hin, win, hout, wout, .. } = *p;
        let k = if K > 0 { K } else { p.k };
        let (in_lanes, out_lanes) = (first_lanes(win), first_lanes(wout));
        let lane = iota(0);
        for ch in 0..c {
            let base = ch * hin * win;
            for r in 0..hin {
                let mut acc = _mm512_setzero_ps();
                for i in (0..k).rev().filter(|&i| i <= r && r - i < hout) {
                    let o = (ch * hout + r - i) * wout;
                    // SAFETY: output row r − i < hout of channel ch: wout values of each.
                    let (arg, d) = unsafe {
                        (
                            _mm512_maskz_loadu_epi32(out_lanes, argmax.as_ptr().add(o).cast()),
                            _mm512_maskz_loadu_ps(out_lanes, dy.as_ptr().add(o)),
                        )
                    };
                    for j in (0..k).rev() {
                        // output lane x hits input (r, x + j): its arg-max is that index
                        let hit = _mm512_mask_cmpeq_epi32_mask(out_lanes, arg, iota(base + r * win + j));
                        // lane x + j of the input row takes output lane x
                        let shifted = _mm512_permutexvar_ps(_mm512_sub_epi32(lane, _mm512_set1_epi32(j as i32)), d);
                        acc = _mm512_mask_add_ps(acc, (hit << j) & in_lanes, acc, shifted);
                    }
                }
                // SAFETY: input row r of channel ch: win ≤ 16 values.
                unsafe { _mm512_mask_storeu_ps(dx.as_mut_ptr().add(base + r * win), in_lanes, acc) };
            }
        }
    }

    /// One example's pool, for windows of `K = p.k` (the loops over the window then unroll),
    /// or of any size for `K = 0`.
    #[target_feature(enable = "avx512f")]
    fn pool<const K: usize>(p: &Windows, x: &[f32], out: &mut [f32], argmax: &mut [u32]) {
        let Windows { c, hin, win, hout, wout, .. } = *p;
        let k = if K > 0 { K } else { p.k };
        for ch in 0..c {
            let base = ch * hin * win;
            for oh in 0..hout {
                for ow in (0..wout).step_by(16) {
                    let m = crate::simd::first_lanes(wout - ow);
                    let start = base + oh * win + ow;
                    let o = (ch * hout + oh) * wout + ow;
                    // SAFETY: lane l < wout − ow of offset (i, j) reads x[start + i·win + j + l],
                    // in row oh + i < hin at column ow + j + l < wout + k − 1 = win; output o + l
                    // lies in row oh of channel ch. Masked-out lanes are not accessed.
                    unsafe {
                        let mut best = _mm512_maskz_loadu_ps(m, x.as_ptr().add(start));
                        let mut idx = iota(start);
                        // The window's offsets after the first, in row-major order (one loop
                        // of constant trip count for K > 0, so that it unrolls).
                        for w in 1..k * k {
                            let at = start + (w / k) * win + w % k;
                            let v = _mm512_maskz_loadu_ps(m, x.as_ptr().add(at));
                            let gt = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(m, v, best);
                            best = _mm512_mask_blend_ps(gt, best, v);
                            idx = _mm512_mask_blend_epi32(gt, idx, iota(at));
                        }
                        _mm512_mask_storeu_ps(out.as_mut_ptr().add(o), m, best);
                        _mm512_mask_storeu_epi32(argmax.as_mut_ptr().add(o).cast(), m, idx);
                    }
                }
            }
        }
    }
}

impl Rule for MaxPool2d {
    fn out_len(&self) -> usize {
        self.0.out_len()
    }

    fn needs(&self) -> Needs {
        Needs { argmax: self.0.out_len(), ..Needs::default() }
    }

    fn forward(&self, f: Forward<'_>) {
        #[cfg(target_arch = "x86_64")]
        if self.0.stride == 1 && crate::simd::has_avx512f() {
            avx512::pool_batch(&self.0, f.input, f.output, &mut f.own.argmax, f.b);
            return;
        }
        pool_batch(&self.0, f.input, f.output, &mut f.own.argmax, f.b);
    }

    fn backward(&self, g: Backward<'_>) {
        let Some(dx) = g.dx else { return };
        #[cfg(target_arch = "x86_64")]
        if avx512::unpools(&self.0) {
            avx512::unpool_batch(&self.0, &g.own.argmax, g.dy, dx, g.b);
            return;
        }
        unpool_batch(&self.0, &g.own.argmax, g.dy, dx, g.b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window scanned value by value in row-major order, the first strictly largest kept.
    fn reference(p: &Windows, x: &[f32]) -> (Vec<f32>, Vec<u32>) {
        let (mut out, mut arg) = (Vec::new(), Vec::new());
        for ch in 0..p.c {
            for oh in 0..p.hout {
                for ow in 0..p.wout {
                    let at = |i: usize, j: usize| ch * p.hin * p.win + (oh * p.stride + i) * p.win + ow * p.stride + j;
                    let (mut bi, mut bv) = (at(0, 0), x[at(0, 0)]);
                    for i in 0..p.k {
                        for j in 0..p.k {
                            if x[at(i, j)] > bv {
                                (bi, bv) = (at(i, j), x[at(i, j)]);
                            }
                        }
                    }
                    out.push(bv);
                    arg.push(bi as u32);
                }
            }
        }
        (out, arg)
    }

    /// Ties, NaN (first in a window or later) and −∞, at strides 1 and 2: the vectorised pool
    /// picks exactly the reference's arg-max.
    #[test]
    fn pool_keeps_the_first_strict_maximum() {
        for (c, k, stride, hin, win) in [
            (2, 2, 1, 6, 5),
            (3, 3, 2, 7, 9),
            (1, 2, 2, 4, 4),
            (2, 3, 1, 5, 7),
            (2, 2, 1, 3, 20),
            (1, 1, 1, 2, 3),
            (2, 2, 1, 14, 14),
            (2, 3, 1, 9, 16),
            (1, 1, 1, 3, 8),
        ] {
            let (hout, wout) = ((hin - k) / stride + 1, (win - k) / stride + 1);
            let p = Windows { c, k, stride, hin, win, hout, wout };
            let specials = [f32::NAN, f32::NEG_INFINITY, 1.0, 1.0, 0.0];
            let x: Vec<f32> = (0..c * hin * win)
                .map(|i| if i % 7 == 3 { specials[(i / 7) % specials.len()] } else { ((i * 5) % 4) as f32 })
                .collect();
            let (want, want_arg) = reference(&p, &x);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            // One example by the generic pool; two (the second the first negated) by the batch
            // kernel, which takes the flat path at stride 1.
            let (mut out, mut arg) = (vec![0.0; p.out_len()], vec![0; p.out_len()]);
            pool(&p, &x, &mut out, &mut arg);
            assert_eq!((arg, bits(&out)), (want_arg.clone(), bits(&want)), "{p:?}");
            let neg: Vec<f32> = x.iter().map(|v| -v).collect();
            let (want2, want2_arg) = reference(&p, &neg);
            let (mut out, mut arg) = (vec![0.0; 2 * p.out_len()], vec![0; 2 * p.out_len()]);
            let both = [x.clone(), neg].concat();
            pool_batch(&p, &both, &mut out, &mut arg, 2);
            assert_eq!(arg, [want_arg.clone(), want2_arg.clone()].concat(), "{p:?}");
            assert_eq!(bits(&out), bits(&[want.clone(), want2.clone()].concat()), "{p:?}");
            // The input gradients, with outputs sharing an arg-max (ties, stride 1).
            // of mixed magnitudes, so that the sums into one input depend on their order
            let dy: Vec<f32> =
                (0..2 * p.out_len()).map(|i| (i as f32 * 0.713).sin() * 10f32.powi(i as i32 % 7 - 3)).collect();
            let mut dx = vec![7.0; 2 * p.c * p.hin * p.win];
            unpool_batch(&p, &arg, &dy, &mut dx, 2);
            let mut want_dx = vec![0.0f32; dx.len()];
            for (o, (&i, &d)) in arg.iter().zip(&dy).enumerate() {
                want_dx[(o / p.out_len()) * p.c * p.hin * p.win + i as usize] += d;
            }
            assert_eq!(bits(&dx), bits(&want_dx), "{p:?}");
            #[cfg(target_arch = "x86_64")]
            if avx512::unpools(&p) {
                let mut dx = vec![7.0; 2 * p.c * p.hin * p.win];
                avx512::unpool_batch(&p, &arg, &dy, &mut dx, 2);
                assert_eq!(bits(&dx), bits(&want_dx), "{p:?} (AVX-512 input gradient)");
            }
            #[cfg(target_arch = "x86_64")]
            if stride == 1 && crate::simd::has_avx512f() {
                let (mut out, mut arg) = (vec![0.0; 2 * p.out_len()], vec![0; 2 * p.out_len()]);
                avx512::pool_batch(&p, &both, &mut out, &mut arg, 2);
                assert_eq!(arg, [want_arg, want2_arg].concat(), "{p:?} (AVX-512)");
                assert_eq!(bits(&out), bits(&[want, want2].concat()), "{p:?} (AVX-512)");
            }
        }
    }
}
