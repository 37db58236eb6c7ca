//! The convolution kernels both engines run (square kernel, stride, zero padding): the im2col
//! matrices of a micro-batch and their adjoint col2im, the forward as one product of those
//! matrices with the weights, each example's weight and bias gradients, and the input gradient.
//! The fast engine's conv2d rule ([`crate::per_example::layers`]) and the burn engine's
//! `dpgd::nn::Conv2d` on flex call the same functions, so the two cannot drift apart.
//!
//! Per example i with im2col matrix colsᵢ (`T × K`, T = output positions, K = cin·k²):
//! forward `yᵢ = W colsᵢᵀ + b`; parameter gradient ∂ℓᵢ/∂W = Δᵢ colsᵢ (one small GEMM per
//! example), ∂ℓᵢ/∂b = Σ_positions Δᵢ; input gradient col2im(Δᵢᵀ W). im2col and its adjoint
//! col2im walk the same window rows on each path ([`Geometry::segments`] with padding,
//! `Geometry::windows` without, `avx512::runs` in vectors), so they cannot drift apart (a
//! test checks both the adjointness and each vector path against the portable one).
//!
//! At stride 1 on a processor with AVX-512 the forward and the weight gradients form no im2col
//! matrix ([`forward_implicit`]): each window offset's inputs are a strided view of the
//! zero-bordered input plane, which is all the weight gradients keep (k² times smaller than the
//! im2col matrix). The same values up to the order of each sum (a test on exact values checks
//! the two paths against each other); the burn engine's residual GroupNorm step took 2.61–2.68 s
//! through im2col and 2.35–2.51 s without (a 2-core Xeon with AVX-512, alternating, three rounds),
//! the fast engine's the same within the noise.

use super::matrix::{MatMut, MatRef, matmul, transpose};

/// Calls `geometry.method::<K>(args)` with the kernel size as a constant for the common sizes
/// (2, 3, 4, 5, 8), `K = 0` (any size) otherwise. Hot path: a window row of a size known to the
/// compiler is copied with a few vector moves, not a call to memmove per row.
macro_rules! by_kernel_size {
    ($g:expr, $method:ident($($arg:expr),*)) => {
        match $g.k {
            2 => $g.$method::<2>($($arg),*),
            3 => $g.$method::<3>($($arg),*),
            4 => $g.$method::<4>($($arg),*),
            5 => $g.$method::<5>($($arg),*),
            8 => $g.$method::<8>($($arg),*),
            _ => $g.$method::<0>($($arg),*),
        }
    };
}
/// Where each k-wide window row of an im2col matrix reads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub hin: usize,
    /// Input width.
    pub win: usize,
    /// Kernel size.
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Zero padding on every side.
    pub pad: usize,
    /// Output height.
    pub hout: usize,
    /// Output width.
    pub wout: usize,
}

impl Geometry {
    /// Output positions T.
    pub fn positions(&self) -> usize {
        self.hout * self.wout
    }
    /// Columns K = cin·k² of the im2col matrix.
    pub fn patch(&self) -> usize {
        self.cin * self.k * self.k
    }
    /// Calls `f(segment, j_lo, j_hi, source)` for every k-wide segment of one example's im2col
    /// matrix (row = output position, columns in the weights' (channel, i, j) order): columns
    /// `segment + j_lo .. segment + j_hi` read input values `source ..` of the channel-major
    /// input; the rest of the segment (or all of it when `source` is `None`) is padding.
    #[inline(always)]
    fn segments(&self, mut f: impl FnMut(usize, usize, usize, Option<usize>)) {
        let Geometry { cin, hin, win, k, stride: s, pad, hout, wout } = *self;
        let kk = self.patch();
        for oh in 0..hout {
            for ow in 0..wout {
                let row = (oh * wout + ow) * kk;
                let w0 = (ow * s) as isize - pad as isize;
                // columns j in [j_lo, j_hi) fall inside the input
                let j_lo = (-w0).clamp(0, k as isize) as usize;
                let j_hi = (win as isize - w0).clamp(0, k as isize) as usize;
                for ch in 0..cin {
                    for i in 0..k {
                        let ih = (oh * s + i) as isize - pad as isize;
                        let inside = ih >= 0 && (ih as usize) < hin && j_lo < j_hi;
                        let source = inside.then(|| (ch * hin + ih as usize) * win + (w0 + j_lo as isize) as usize);
                        f(row + (ch * k + i) * k, j_lo, j_hi, source);
                    }
                }
            }
        }
    }

    /// The values of one example's zero-bordered plane, where the batch kernels use one: padding
    /// narrower than the kernel (the usual "same" padding), so that the plane is within a few
    /// times the input and im2col matrix (both bounded when the network is compiled); `None`
    /// without padding, or for wider padding (the per-segment path then allocates nothing).
    fn padded_plane(&self) -> Option<usize> {
        if self.pad == 0 || self.pad >= self.k {
            return None;
        }
        let side = |n: usize| n.checked_add(self.pad.checked_mul(2)?);
        self.cin.checked_mul(side(self.hin)?)?.checked_mul(side(self.win)?)
    }

    /// The same windows over the input with its zero border made part of it (no padding).
    fn padded(&self) -> Geometry {
        // Used only where `padded_plane` is Some (these sizes then fit); saturating, so that a
        // huge padding cannot overflow while the batch kernels decide.
        let border = self.pad.saturating_mul(2);
        let (hin, win) = (self.hin.saturating_add(border), self.win.saturating_add(border));
        Geometry { hin, win, pad: 0, ..*self }
    }

    /// Copies one example's input into the interior of a [`padded`](Self::padded) plane (its
    /// border stays as it is: zero).
    #[inline(always)]
    fn pad_into(&self, x: &[f32], plane: &mut [f32]) {
        let (pw, ph) = (self.win + 2 * self.pad, self.hin + 2 * self.pad);
        for (ch, src) in x.chunks_exact(self.hin * self.win).enumerate() {
            for (r, row) in src.chunks_exact(self.win).enumerate() {
                let at = (ch * ph + r + self.pad) * pw + self.pad;
                plane[at..at + self.win].copy_from_slice(row);
            }
        }
    }

    /// The [`padded`](Self::padded) plane of one example, every value written (the border's
    /// zeros too): for planes at most 16 wide in AVX-512 vectors, a row per masked store.
    fn pad_over(&self, x: &[f32], plane: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if avx512::takes_pad(self) {
            avx512::pad(self, x, plane);
            return;
        }
        plane.fill(0.0);
        self.pad_into(x, plane);
    }

    /// The interior of a [`padded`](Self::padded) plane: the inverse of
    /// [`pad_into`](Self::pad_into).
    #[inline(always)]
    fn crop_from(&self, plane: &[f32], x: &mut [f32]) {
        let (pw, ph) = (self.win + 2 * self.pad, self.hin + 2 * self.pad);
        for (ch, dst) in x.chunks_exact_mut(self.hin * self.win).enumerate() {
            for (r, row) in dst.chunks_exact_mut(self.win).enumerate() {
                let at = (ch * ph + r + self.pad) * pw + self.pad;
                row.copy_from_slice(&plane[at..at + self.win]);
            }
        }
    }

    /// [`segments`](Self::segments) without padding (every window inside the input) for kernel
    /// size `K = k`: `f(segment, source)` for each whole window row, in the same order.
    #[inline(always)]
    fn windows<const K: usize>(&self, mut f: impl FnMut(usize, usize)) {
        let Geometry { cin, hin, win, stride: s, hout, wout, .. } = *self;
        let kk = cin * K * K;
        for oh in 0..hout {
            for ow in 0..wout {
                let row = (oh * wout + ow) * kk;
                for ch in 0..cin {
                    for i in 0..K {
                        f(row + (ch * K + i) * K, (ch * hin + oh * s + i) * win + ow * s);
                    }
                }
            }
        }
    }

    /// One example's im2col matrix from its channel-major input.
    #[inline(always)]
    fn im2col(&self, x: &[f32], cols: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if avx512::takes_im2col(self) {
            avx512::im2col(self, x, cols);
            return;
        }
        by_kernel_size!(self, im2col_k(x, cols))
    }

    /// [`im2col`](Self::im2col) for kernel size `K` (`K = 0`: any size).
    #[inline(always)]
    fn im2col_k<const K: usize>(&self, x: &[f32], cols: &mut [f32]) {
        if K > 0 && self.pad == 0 {
            // Every window lies inside the input: no clamping, whole rows only.
            self.windows::<K>(|seg, src| {
                let (to, from): (&mut [f32; K], &[f32; K]) = fixed(&mut cols[seg..seg + K], &x[src..src + K]);
                *to = *from;
            });
            return;
        }
        let k = self.k;
        self.segments(|seg, lo, hi, source| {
            let s = &mut cols[seg..seg + k];
            match source {
                None => s.fill(0.0),
                Some(src) if K > 0 && lo == 0 && hi == K => {
                    let (to, from): (&mut [f32; K], &[f32; K]) = fixed(s, &x[src..src + K]);
                    *to = *from;
                }
                Some(src) => {
                    s[..lo].fill(0.0);
                    s[lo..hi].copy_from_slice(&x[src..src + (hi - lo)]);
                    s[hi..].fill(0.0);
                }
            }
        });
    }

    /// The adjoint of [`im2col`](Self::im2col): scatter-adds column gradients onto the input
    /// gradient.
    #[inline(always)]
    fn col2im(&self, dcols: &[f32], dx: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if avx512::takes_col2im(self) {
            avx512::col2im(self, dcols, dx);
            return;
        }
        by_kernel_size!(self, col2im_k(dcols, dx))
    }

    /// [`col2im`](Self::col2im) for kernel size `K` (`K = 0`: any size).
    #[inline(always)]
    fn col2im_k<const K: usize>(&self, dcols: &[f32], dx: &mut [f32]) {
        if K > 0 && self.pad == 0 {
            self.windows::<K>(|seg, src| {
                let (to, from): (&mut [f32; K], &[f32; K]) = fixed(&mut dx[src..src + K], &dcols[seg..seg + K]);
                for (d, v) in to.iter_mut().zip(from) {
                    *d += v;
                }
            });
            return;
        }
        self.segments(|seg, lo, hi, source| {
            let Some(src) = source else { return };
            if K > 0 && lo == 0 && hi == K {
                let (to, from): (&mut [f32; K], &[f32; K]) = fixed(&mut dx[src..src + K], &dcols[seg..seg + K]);
                for (d, v) in to.iter_mut().zip(from) {
                    *d += v;
                }
            } else {
                for (d, v) in dx[src..src + (hi - lo)].iter_mut().zip(&dcols[seg + lo..seg + hi]) {
                    *d += v;
                }
            }
        });
    }
}

/// Two slices of length `K` as arrays (callers slice exactly `K` values).
#[inline(always)]
fn fixed<'a, 'b, const K: usize>(to: &'a mut [f32], from: &'b [f32]) -> (&'a mut [f32; K], &'b [f32; K]) {
    match (<&mut [f32; K]>::try_from(to), <&[f32; K]>::try_from(from)) {
        (Ok(t), Ok(f)) => (t, f),
        _ => unreachable!("callers slice exactly K values"),
    }
}
crate::simd::kernel! {
/// The im2col matrices of the examples of `x` (one after the other) into `cols`. With padding,
/// each example is first copied into a zero-bordered plane ([`Geometry::padded_plane`]), so
/// that every window row is read whole (no partial rows at the borders).
fn im2col_batch(g: &Geometry, x: &[f32], cols: &mut [f32]) {
    let (n_in, n_cols) = (g.cin * g.hin * g.win, g.positions() * g.patch());
    let padded = g.padded();
    let mut plane = vec![0.0f32; g.padded_plane().unwrap_or(0)];
    for (xe, ce) in x.chunks_exact(n_in).zip(cols.chunks_exact_mut(n_cols)) {
        if plane.is_empty() {
            g.im2col(xe, ce);
        } else {
            g.pad_into(xe, &mut plane);
            padded.im2col(&plane, ce);
        }
    }
}
}

crate::simd::kernel! {
/// The input gradients of the examples of `dcols` (one after the other) into `dx`, overwritten.
/// With padding, through a zero-bordered plane whose border is then dropped: each input value
/// receives the same terms in the same order as without it.
fn col2im_batch(g: &Geometry, dcols: &[f32], dx: &mut [f32]) {
    dx.fill(0.0);
    let (n_in, n_cols) = (g.cin * g.hin * g.win, g.positions() * g.patch());
    let padded = g.padded();
    let mut plane = vec![0.0f32; g.padded_plane().unwrap_or(0)];
    for (ce, de) in dcols.chunks_exact(n_cols).zip(dx.chunks_exact_mut(n_in)) {
        if plane.is_empty() {
            g.col2im(ce, de);
        } else {
            plane.fill(0.0);
            padded.col2im(ce, &mut plane);
            g.crop_from(&plane, de);
        }
    }
}
}

crate::simd::kernel! {
/// `sums[c] = Σ plane c` of one example's planes of `t` values, each in 16 running lanes (so
/// that the additions vectorise), the lanes then added pairwise in a fixed tree (a sequential
/// sum of 16 lanes would wait on each addition in turn).
fn plane_sums(sums: &mut [f32], planes: &[f32], t: usize) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx512f() {
        avx512::plane_sums(sums, planes, t);
        return;
    }
    const LANES: usize = 16;
    for (s, plane) in sums.iter_mut().zip(planes.chunks_exact(t)) {
        let mut lanes = [0.0f32; LANES];
        let chunks = plane.chunks_exact(LANES);
        for (l, &v) in lanes.iter_mut().zip(chunks.remainder()) {
            *l += v;
        }
        for c in chunks {
            lanes.iter_mut().zip(c).for_each(|(l, &v)| *l += v);
        }
        *s = crate::simd::pairwise_sum(lanes);
    }
}
}

/// Per example, `[rows, cols]` → `[cols, rows]` (channel-last ⇄ channel-major), adding
/// `column[c]` to every value of column `c` when given (the bias, on the way to channel-major).
fn transpose_planes(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, column: Option<&[f32]>) {
    let n = rows * cols;
    for (s, d) in src.chunks_exact(n).zip(dst.chunks_exact_mut(n)) {
        transpose(s, d, rows, cols, column);
    }
}

/// The conv kernels in AVX-512 vectors, each giving the same values as its portable form (a
/// test): the lanes of a plane sum, and whole 16-value runs of an im2col row moved at once. The
/// portable kernels move one k-wide window row at a time, with an index computation and bounds
/// checks per row of four or eight values.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512, _mm_add_ps, _mm_loadu_ps, _mm_storeu_ps, _mm256_add_ps, _mm256_castpd_ps, _mm256_castps_pd,
        _mm256_loadu_ps, _mm256_storeu_ps, _mm512_add_ps, _mm512_castpd_ps, _mm512_castps_pd, _mm512_castps128_ps512,
        _mm512_castps256_ps512, _mm512_castps512_ps128, _mm512_castps512_ps256, _mm512_extractf32x4_ps,
        _mm512_extractf64x4_pd, _mm512_insertf32x4, _mm512_insertf64x4, _mm512_loadu_ps, _mm512_mask_add_ps,
        _mm512_mask_loadu_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps,
    };

    use super::Geometry;
    use crate::simd::{first_lanes, has_avx512f, pairwise_sum_ps};

    /// [`super::plane_sums`]: the same 16 lanes (the partial last chunk first, then the
    /// chunks in order) and the same tree, so the same sums.
    pub(super) fn plane_sums(sums: &mut [f32], planes: &[f32], t: usize) {
        assert!(has_avx512f() && planes.len() >= sums.len() * t, "plane sums: sizes or AVX-512F");
        // SAFETY: AVX-512F is present (checked above).
        unsafe { plane_sums_in(sums, planes, t) }
    }

    #[target_feature(enable = "avx512f")]
    fn plane_sums_in(sums: &mut [f32], planes: &[f32], t: usize) {
        let (full, tail) = (t / 16, t % 16);
        for (s, plane) in sums.iter_mut().zip(planes.chunks_exact(t.max(1))) {
            let p = plane.as_ptr();
            // SAFETY: `plane` holds `t` values: `full` whole vectors, then `tail` under the mask.
            unsafe {
                let mut acc = _mm512_maskz_loadu_ps(first_lanes(tail), p.add(16 * full));
                for c in 0..full {
                    acc = _mm512_add_ps(acc, _mm512_loadu_ps(p.add(16 * c)));
                }
                *s = pairwise_sum_ps(acc);
            }
        }
    }

    /// Whether [`im2col`] takes `g`: no padding (the batch kernels pad into a plane first),
    /// windows 4 or 8 wide (16 values of a row are then 4 or 2 window rows of one channel) or 3
    /// wide (a channel's whole 3 × 3 window, 9 values, under a mask), and AVX-512F.
    pub(super) fn takes_im2col(g: &Geometry) -> bool {
        g.pad == 0 && matches!(g.k, 3 | 4 | 8) && has_avx512f()
    }

    /// Whether [`col2im`] takes `g`: as [`takes_im2col`] but not 3-wide windows, whose masked
    /// adds stall on the overlapping windows' stores (measured 2.7× slower than the portable
    /// kernel).
    pub(super) fn takes_col2im(g: &Geometry) -> bool {
        g.pad == 0 && matches!(g.k, 4 | 8) && has_avx512f()
    }

    /// Lanes 3i to 3i + 2: row i of a 3 × 3 window.
    const fn row3(i: u32) -> u16 {
        0b111 << (3 * i)
    }

    /// Calls `f(dst, src)` for every channel's 3 × 3 window of the im2col matrix (in the
    /// portable kernels' order): `dst` the offset of its 9 values, `src` the input offset of its
    /// first window row; the rows follow `win` apart.
    #[inline(always)]
    fn windows3(g: &Geometry, mut f: impl FnMut(usize, usize)) {
        let Geometry { cin, hin, win, stride: s, hout, wout, .. } = *g;
        for oh in 0..hout {
            for ow in 0..wout {
                let row = (oh * wout + ow) * cin * 9;
                for ch in 0..cin {
                    f(row + ch * 9, (ch * hin + oh * s) * win + ow * s);
                }
            }
        }
    }

    /// Checks that `takes` takes `g`, that every window of `g` (unpadded) lies inside an input of `n_in` values and
    /// that `n_cols` holds the im2col matrix: what the unchecked accesses below rest on.
    fn check(g: &Geometry, takes: fn(&Geometry) -> bool, n_in: usize, n_cols: usize) {
        // checked arithmetic: the unsafe accesses rest on these, so no size may wrap
        let inside = |out: usize, len: usize| {
            out == 0 || (out - 1).checked_mul(g.stride).and_then(|v| v.checked_add(g.k)).is_some_and(|end| end <= len)
        };
        let fits = |need: Option<usize>, have: usize| need.is_some_and(|n| n <= have);
        let input = g.cin.checked_mul(g.hin).and_then(|v| v.checked_mul(g.win));
        let cols = g.hout.checked_mul(g.wout).and_then(|t| t.checked_mul(g.cin)).and_then(|v| v.checked_mul(g.k * g.k));
        assert!(
            takes(g) && inside(g.hout, g.hin) && inside(g.wout, g.win) && fits(input, n_in) && fits(cols, n_cols),
            "grouped im2col: geometry {g:?} does not fit its buffers"
        );
    }

    /// Calls `f(dst, src)` for every 16 values of the im2col matrix (in the portable kernels'
    /// order): `dst` the offset of the run, `src` the input offset of its first window row;
    /// the run's window rows follow `win` apart.
    #[inline(always)]
    fn runs(g: &Geometry, mut f: impl FnMut(usize, usize)) {
        let Geometry { cin, hin, win, k, stride: s, hout, wout, .. } = *g;
        let (kk, per_run) = (g.patch(), 16 / k);
        for oh in 0..hout {
            for ow in 0..wout {
                let row = (oh * wout + ow) * kk;
                for ch in 0..cin {
                    for i in (0..k).step_by(per_run) {
                        f(row + (ch * k + i) * k, (ch * hin + oh * s + i) * win + ow * s);
                    }
                }
            }
        }
    }

    /// Whether [`crop`] takes `g`: output rows of at most 16 values.
    pub(super) fn takes_crop(g: &Geometry) -> bool {
        g.wout <= 16 && has_avx512f()
    }

    /// [`super::crop`] for a geometry [`takes_crop`] takes: each output row one masked load, add
    /// and store (the same additions, so the same values).
    pub(super) fn crop(g: &Geometry, (wide, bias): (&[f32], Option<&[f32]>), out: &mut [f32]) {
        let (t, l) = (g.positions(), g.wide().3);
        let cout = out.len() / t.max(1);
        assert!(takes_crop(g) && wide.len() >= cout * l && bias.is_none_or(|b| b.len() >= cout), "crop: sizes");
        // SAFETY: AVX-512F is present and the sizes match (checked above).
        unsafe { crop_in(g, (wide, bias), out) }
    }

    #[target_feature(enable = "avx512f")]
    fn crop_in(g: &Geometry, (wide, bias): (&[f32], Option<&[f32]>), out: &mut [f32]) {
        let (t, wp, l) = (g.positions(), g.win + 2 * g.pad, g.wide().3);
        let row = first_lanes(g.wout);
        for (co, (dst, src)) in out.chunks_exact_mut(t).zip(wide.chunks_exact(l)).enumerate() {
            let add = _mm512_set1_ps(bias.map_or(0.0, |b| b[co]));
            for oy in 0..g.hout {
                // SAFETY: output row oy: wout values at oy·Wp of the wide row (≤ L) and at
                // oy·wout of the output plane.
                unsafe {
                    let v = _mm512_maskz_loadu_ps(row, src.as_ptr().add(oy * wp));
                    _mm512_mask_storeu_ps(dst.as_mut_ptr().add(oy * g.wout), row, _mm512_add_ps(v, add));
                }
            }
        }
    }

    /// Whether [`pad`] takes `g`: padded rows of at most 16 values.
    pub(super) fn takes_pad(g: &Geometry) -> bool {
        g.win + 2 * g.pad <= 16 && has_avx512f()
    }

    /// [`Geometry::pad_over`] for a geometry [`takes_pad`] takes: each padded row one masked
    /// store, its interior loaded into lanes pad..pad + win (the border lanes zero).
    pub(super) fn pad(g: &Geometry, x: &[f32], plane: &mut [f32]) {
        let (hp, wp) = (g.hin + 2 * g.pad, g.win + 2 * g.pad);
        assert!(takes_pad(g) && x.len() == g.cin * g.hin * g.win && plane.len() == g.cin * hp * wp, "pad: sizes");
        // SAFETY: AVX-512F is present and the sizes match (checked above).
        unsafe { pad_in(g, x, plane) }
    }

    #[target_feature(enable = "avx512f")]
    fn pad_in(g: &Geometry, x: &[f32], plane: &mut [f32]) {
        let (hp, wp) = (g.hin + 2 * g.pad, g.win + 2 * g.pad);
        let (row, inside) = (first_lanes(wp), first_lanes(g.win) << g.pad);
        for ch in 0..g.cin {
            for r in 0..hp {
                let out = (ch * hp + r) * wp;
                let v = match r.checked_sub(g.pad).filter(|&ir| ir < g.hin) {
                    // SAFETY: lanes pad..pad + win read input row ir of channel ch (the address
                    // `pad` floats before it formed with wrapping arithmetic; the other lanes are
                    // not read).
                    Some(ir) => unsafe {
                        let src = x.as_ptr().wrapping_add((ch * g.hin + ir) * g.win).wrapping_sub(g.pad);
                        _mm512_maskz_loadu_ps(inside, src)
                    },
                    None => _mm512_setzero_ps(),
                };
                // SAFETY: padded row r of channel ch: wp ≤ 16 values of `plane`.
                unsafe { _mm512_mask_storeu_ps(plane.as_mut_ptr().add(out), row, v) };
            }
        }
    }

    /// [`Geometry::im2col`] for a geometry [`takes_im2col`] takes.
    pub(super) fn im2col(g: &Geometry, x: &[f32], cols: &mut [f32]) {
        check(g, takes_im2col, x.len(), cols.len());
        // SAFETY: AVX-512F is present and the windows fit (checked above).
        unsafe { im2col_in(g, x, cols) }
    }

    #[target_feature(enable = "avx512f")]
    fn im2col_in(g: &Geometry, x: &[f32], cols: &mut [f32]) {
        let (xp, cp, win) = (x.as_ptr(), cols.as_mut_ptr(), g.win);
        if g.k == 3 {
            windows3(g, |dst, src| {
                // SAFETY: the window's rows lie inside `x` and its 9 values inside `cols`
                // (`check`). Row i's 3 values go to lanes 3i..3i + 2, loaded from an address 3i
                // floats before the row (formed with wrapping arithmetic; only the unmasked lanes,
                // the row itself, are read).
                unsafe {
                    let p = xp.add(src);
                    let v = _mm512_maskz_loadu_ps(row3(0), p);
                    let v = _mm512_mask_loadu_ps(v, row3(1), p.wrapping_add(win).wrapping_sub(3));
                    let v = _mm512_mask_loadu_ps(v, row3(2), p.wrapping_add(2 * win).wrapping_sub(6));
                    _mm512_mask_storeu_ps(cp.add(dst), 0x1ff, v);
                }
            });
            return;
        }
        runs(g, |dst, src| {
            // SAFETY: each window row read lies inside `x` and each run inside `cols` (`check`).
            unsafe {
                let p = xp.add(src);
                let v = if g.k == 4 {
                    let v = _mm512_castps128_ps512(_mm_loadu_ps(p));
                    let v = _mm512_insertf32x4::<1>(v, _mm_loadu_ps(p.add(win)));
                    let v = _mm512_insertf32x4::<2>(v, _mm_loadu_ps(p.add(2 * win)));
                    _mm512_insertf32x4::<3>(v, _mm_loadu_ps(p.add(3 * win)))
                } else {
                    let high = _mm256_castps_pd(_mm256_loadu_ps(p.add(win)));
                    let v = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(p)));
                    _mm512_castpd_ps(_mm512_insertf64x4::<1>(v, high))
                };
                _mm512_storeu_ps(cp.add(dst), v);
            }
        });
    }

    /// [`Geometry::col2im`] for a geometry [`takes_col2im`] takes: each window row added in the
    /// portable kernel's order, so the same sums.
    pub(super) fn col2im(g: &Geometry, dcols: &[f32], dx: &mut [f32]) {
        check(g, takes_col2im, dx.len(), dcols.len());
        // SAFETY: AVX-512F is present and the windows fit (checked above).
        unsafe { col2im_in(g, dcols, dx) }
    }

    #[target_feature(enable = "avx512f")]
    fn col2im_in(g: &Geometry, dcols: &[f32], dx: &mut [f32]) {
        let (cp, xp, win) = (dcols.as_ptr(), dx.as_mut_ptr(), g.win);
        runs(g, |dst, src| {
            // SAFETY: as in `im2col_in`; the window rows of one run are distinct rows of `dx`.
            unsafe {
                let v: __m512 = _mm512_loadu_ps(cp.add(dst));
                let p = xp.add(src);
                if g.k == 4 {
                    let add = |at: *mut f32, part| _mm_storeu_ps(at, _mm_add_ps(_mm_loadu_ps(at), part));
                    add(p, _mm512_castps512_ps128(v));
                    add(p.add(win), _mm512_extractf32x4_ps::<1>(v));
                    add(p.add(2 * win), _mm512_extractf32x4_ps::<2>(v));
                    add(p.add(3 * win), _mm512_extractf32x4_ps::<3>(v));
                } else {
                    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm512_castps512_ps256(v)));
                    let q = p.add(win);
                    _mm256_storeu_ps(q, _mm256_add_ps(_mm256_loadu_ps(q), high));
                }
            }
        });
    }

    /// Whether [`shift_add`] takes `g`: stride 1, no padding, input rows of at most 16 values
    /// (one vector each), on a processor with AVX-512F.
    pub(super) fn takes_shift_add(g: &Geometry) -> bool {
        g.stride == 1 && g.pad == 0 && g.win <= 16 && g.k >= 1 && has_avx512f()
    }

    /// [`super::shift_add_rows`] for a geometry [`takes_shift_add`] takes: each input row
    /// loaded once per window row `i` as one vector, the `k` shifted rows of `dcols_t` added to
    /// it in order of `j` (each under the mask of the lanes it covers, so the other lanes keep
    /// their values), then stored — the portable kernel's additions in its order, so the same
    /// values.
    pub(super) fn shift_add(g: &Geometry, dcols_t: &[f32], dx: &mut [f32]) {
        let Geometry { cin, hin, win, k, hout, wout, .. } = *g;
        // checked arithmetic: the unsafe accesses rest on these, so no size may wrap
        let rows = cin.checked_mul(k * k).and_then(|r| r.checked_mul(hout * wout));
        let input = cin.checked_mul(hin * win);
        assert!(
            takes_shift_add(g)
                && hout + k - 1 <= hin
                && wout + k - 1 <= win
                && rows.is_some_and(|n| n <= dcols_t.len())
                && input.is_some_and(|n| n <= dx.len()),
            "shift_add: geometry {g:?} does not fit its buffers"
        );
        // SAFETY: AVX-512F is present and the sizes fit (checked above).
        unsafe { shift_add_in(g, dcols_t, dx) }
    }

    #[target_feature(enable = "avx512f")]
    fn shift_add_in(g: &Geometry, dcols_t: &[f32], dx: &mut [f32]) {
        let Geometry { cin, hin, win, k, hout, wout, .. } = *g;
        let (t, whole) = (hout * wout, first_lanes(win));
        let (src, dst) = (dcols_t.as_ptr(), dx.as_mut_ptr());
        for ch in 0..cin {
            for i in 0..k {
                for oh in 0..hout {
                    // SAFETY: input row oh + i < hin of channel ch holds `win` ≤ 16 values
                    // inside `dx`; row oh of each `dcols_t` row (ch, i, j) holds `wout` values
                    // inside `dcols_t` (asserted in `shift_add`). The source is addressed j
                    // floats before its row (wrapping arithmetic) so that its values land in
                    // lanes j..j + wout ≤ win; only those lanes are read.
                    unsafe {
                        let at = dst.add((ch * hin + oh + i) * win);
                        let mut d = _mm512_maskz_loadu_ps(whole, at);
                        for j in 0..k {
                            let row = src.add(((ch * k + i) * k + j) * t + oh * wout);
                            let lanes = first_lanes(wout) << j;
                            let v = _mm512_maskz_loadu_ps(lanes, row.wrapping_sub(j));
                            d = _mm512_mask_add_ps(d, lanes, d, v);
                        }
                        _mm512_mask_storeu_ps(at, whole, d);
                    }
                }
            }
        }
    }
}

/// A convolution's forward over a micro-batch of `b` examples: `x` (`b` channel-major inputs)
/// into `out` (`b` channel-major outputs of `cout` planes), through `cols` (what the weight
/// gradients need, [`Geometry::cols_len`] values per example, kept for them) and `hwc`
/// (scratch); [`forward_scratch`] gives both lengths. `weights` is `[cout, K]` row-major, `bias`
/// `[cout]`. At stride 1 (with a padding narrower than the window) on a processor with AVX-512,
/// without im2col ([`forward_implicit`]); otherwise through the im2col matrices.
pub(crate) fn forward_batch(
    g: &Geometry,
    (weights, bias): (&[f32], Option<&[f32]>),
    (b, x): (usize, &[f32]),
    (cols, hwc): (&mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    if g.implicit() {
        forward_implicit(g, (weights, bias), (b, x), (cols, hwc), out);
    } else {
        forward_im2col(g, (weights, bias), (b, x), (cols, hwc), out);
    }
}

/// [`forward_batch`] through the im2col matrices.
fn forward_im2col(
    g: &Geometry,
    (weights, bias): (&[f32], Option<&[f32]>),
    (b, x): (usize, &[f32]),
    (cols, hwc): (&mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    let (t, kk, n_in) = (g.positions(), g.patch(), g.cin * g.hin * g.win);
    let cout = weights.len() / kk.max(1);
    let cols = &mut cols[..b * t * kk];
    im2col_batch(g, &x[..b * n_in], cols);
    // hwc[b·T × cout] = cols[b·T × K] · Wᵀ, then to channel-major
    let hwc = &mut hwc[..b * t * cout];
    let weights = MatRef::row_major(weights, cout, kk);
    matmul(MatMut::row_major(hwc, b * t, cout), MatRef::row_major(cols, b * t, kk), weights.t(), false);
    // to channel-major, the bias added on the way
    transpose_planes(hwc, out, t, cout, bias);
}

/// The lengths of [`forward_batch`]'s `cols` and `hwc` for `b` examples and `cout` output
/// channels (without im2col, `hwc` holds one example's wide rows at a time).
pub(crate) fn forward_scratch(g: &Geometry, b: usize, cout: usize) -> (usize, usize) {
    (b * g.cols_len(), if g.implicit() { cout * g.wide().3 } else { b * g.positions() * cout })
}

/// One example's weight gradient `Δ · cols` (`[cout, K]`, into `weight`) and, when given, its
/// bias gradient (Δ summed over positions, into `bias`), from its output gradient `dy`
/// (`[cout, T]`) and what [`forward_batch`] left in `cols` for it ([`Geometry::cols_len`]
/// values: its im2col matrix `[T, K]`, or its zero-bordered plane).
pub(crate) fn weight_rows(g: &Geometry, dy: &[f32], cols: &[f32], weight: &mut [f32], bias: Option<&mut [f32]>) {
    let (t, kk) = (g.positions(), g.patch());
    let cout = dy.len() / t.max(1);
    if g.implicit() {
        weight_rows_implicit(g, dy, cols, weight);
    } else {
        // ∂W[cout × K] = Δ[cout × T] · cols[T × K]
        matmul(
            MatMut::row_major(weight, cout, kk),
            MatRef::row_major(dy, cout, t),
            MatRef::row_major(cols, t, kk),
            false,
        );
    }
    if let Some(bias) = bias {
        plane_sums(bias, dy, t);
    }
}

impl Geometry {
    /// Whether the forward and the weight gradients run without im2col ([`forward_implicit`],
    /// [`weight_rows_implicit`]): stride 1 with a padding narrower than the window (or none), on
    /// a processor with AVX-512, whose tiled product reads the strided views they use in place.
    fn implicit(&self) -> bool {
        self.stride == 1 && (self.pad == 0 || self.padded_plane().is_some()) && crate::simd::has_avx512f()
    }

    /// Values per example of what [`forward_batch`] leaves in `cols` for [`weight_rows`]: the
    /// im2col matrix (T·K), or without im2col the zero-bordered input plane.
    pub(crate) fn cols_len(&self) -> usize {
        if self.implicit() { self.wide().2 } else { self.positions() * self.patch() }
    }

    /// For [`implicit`](Self::implicit): the zero-bordered plane's height and width, its values,
    /// and the length L = (hout − 1)·Wp + wout of the wide rows (each output row followed by
    /// k − 1 positions past its end).
    fn wide(&self) -> (usize, usize, usize, usize) {
        let (hp, wp) = (self.hin + 2 * self.pad, self.win + 2 * self.pad);
        (hp, wp, self.cin * hp * wp, (self.hout - 1) * wp + self.wout)
    }
}

/// The forward of `b` examples without im2col, at stride 1 (see [`Geometry::implicit`]). Over
/// an example's zero-bordered plane (Hp × Wp per channel), output position (oy, ox) taken at
/// oy·Wp + ox reads window offset (i, j) of channel c at c·Hp·Wp + i·Wp + j + oy·Wp + ox: for
/// each (i, j) the inputs of all positions are the rows of one strided view, `cin × L` with rows
/// Hp·Wp apart, so `y = Σ_(i,j) W_(i,j) · view_(i,j)` (W_(i,j): `cout × cin`, the weights'
/// columns (c, i, j)) is k² products into a `cout × L` buffer, then each output row is cropped
/// (the k − 1 positions past its end are not outputs) and the bias added. The last position
/// read, (cin − 1)·Hp·Wp + (k − 1)·(Wp + 1) + L − 1, is the plane's last value (Hp = hout + k − 1,
/// Wp = wout + k − 1). Each example's plane is left in `cols` ([`Geometry::cols_len`] values
/// each) for [`weight_rows_implicit`]; the wide rows go through `hwc` (`cout × L`, overwritten).
fn forward_implicit(
    g: &Geometry,
    (weights, bias): (&[f32], Option<&[f32]>),
    (b, x): (usize, &[f32]),
    (cols, hwc): (&mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    let (t, kk, k, n_in) = (g.positions(), g.patch(), g.k, g.cin * g.hin * g.win);
    let cout = weights.len() / kk.max(1);
    let (hp, wp, plane_len, l) = g.wide();
    let wide = &mut hwc[..cout * l];
    for e in 0..b {
        // A reused buffer holds stale values: every value of the plane is written.
        let plane = &mut cols[e * plane_len..(e + 1) * plane_len];
        g.pad_over(&x[e * n_in..(e + 1) * n_in], plane);
        for (w, (i, j)) in (0..k).flat_map(|i| (0..k).map(move |j| (i, j))).enumerate() {
            let wij = MatRef::strided(&weights[i * k + j..], (cout, g.cin), (kk, k * k));
            let view = MatRef::strided(&plane[i * wp + j..], (g.cin, l), (hp * wp, 1));
            // The first offset overwrites whatever the buffer held.
            matmul(MatMut::row_major(wide, cout, l), wij, view, w > 0);
        }
        crop(g, (wide, bias), &mut out[e * cout * t..(e + 1) * cout * t]);
    }
}

/// Each channel's output rows of [`forward_implicit`]'s wide rows (`cout × L`, an output row
/// every Wp values), with the channel's bias added (none: zero).
fn crop(g: &Geometry, (wide, bias): (&[f32], Option<&[f32]>), out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::takes_crop(g) {
        avx512::crop(g, (wide, bias), out);
        return;
    }
    let (t, wp, l) = (g.positions(), g.win + 2 * g.pad, g.wide().3);
    for (co, (dst, src)) in out.chunks_exact_mut(t).zip(wide.chunks_exact(l)).enumerate() {
        let add = bias.map_or(0.0, |b| b[co]);
        for (d, s) in dst.chunks_exact_mut(g.wout).zip(src.chunks(wp)) {
            d.iter_mut().zip(s).for_each(|(d, &s)| *d = s + add);
        }
    }
}

thread_local! {
    /// [`weight_rows_implicit`]'s scratch: Δᵀ, Δᵀ on the wide rows, and ∂Wᵀ.
    static WIDE: std::cell::RefCell<[Vec<f32>; 3]> = const { std::cell::RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// One example's weight gradient without im2col (see [`forward_implicit`], whose plane `cols`
/// starts with): `∂W_(i,j)ᵀ = view_(i,j) · Δ̃ᵀ` (`cin × cout`), where Δ̃ is Δ on the wide rows
/// (zero at the k − 1 positions past each output row's end, so that they add nothing), into the
/// rows (c, i, j) of ∂Wᵀ (`K × cout`), then transposed into `weight` (`cout × K`).
fn weight_rows_implicit(g: &Geometry, dy: &[f32], cols: &[f32], weight: &mut [f32]) {
    let (t, kk, k, cin) = (g.positions(), g.patch(), g.k, g.cin);
    let cout = dy.len() / t.max(1);
    let (hp, wp, plane_len, l) = g.wide();
    let plane = &cols[..plane_len];
    WIDE.with_borrow_mut(|[dt, wide, wt]| {
        dt.resize(t * cout, 0.0);
        transpose(&dy[..cout * t], dt, cout, t, None);
        // Every value is written: each output row's Δ, then k − 1 zeros (none after the last).
        wide.resize(l * cout, 0.0);
        for (dst, src) in wide.chunks_mut(wp * cout).zip(dt.chunks_exact(g.wout * cout)) {
            let (row, gap) = dst.split_at_mut(src.len());
            row.copy_from_slice(src);
            gap.fill(0.0);
        }
        wt.resize(kk * cout, 0.0);
        let wide = MatRef::row_major(wide, l, cout);
        for w in 0..k * k {
            let view = MatRef::strided(&plane[(w / k) * wp + w % k..], (cin, l), (hp * wp, 1));
            matmul(MatMut::rows_apart(&mut wt[w * cout..], (cin, cout), k * k * cout), view, wide, false);
        }
        transpose(wt, &mut weight[..cout * kk], kk, cout, None);
    });
}

/// The input gradients of a micro-batch of `b` examples into `dx` (overwritten): `dcols = Δᵀ·W`
/// then col2im, through `hwc` (`b·T·cout`) and `dcols` (`b·T·K`) scratch. `dy` holds `b`
/// channel-major output gradients, `weights` is `[cout, K]` row-major.
///
/// At stride 1 (with a padding narrower than the window) through each example's transposed
/// column gradients instead ([`input_grad_transposed`]); the two differ only in the order of
/// each input value's additions.
pub(crate) fn input_grad_batch(
    g: &Geometry,
    weights: &[f32],
    (b, dy): (usize, &[f32]),
    (hwc, dcols): (&mut [f32], &mut [f32]),
    dx: &mut [f32],
) {
    if g.transposes_input_grad() {
        input_grad_transposed(g, weights, (b, dy), dcols, dx);
    } else {
        input_grad_scattered(g, weights, (b, dy), (hwc, dcols), dx);
    }
}

/// The scratch [`input_grad_batch`] uses for `b` examples and `cout` output channels: the
/// lengths of its `hwc` and `dcols`.
pub(crate) fn input_grad_scratch(g: &Geometry, b: usize, cout: usize) -> (usize, usize) {
    let (t, kk) = (g.positions(), g.patch());
    if g.transposes_input_grad() { (0, kk * t) } else { (b * t * cout, b * t * kk) }
}

impl Geometry {
    /// Whether [`input_grad_batch`] takes [`input_grad_transposed`]: stride 1, and a padding
    /// narrower than the window (through a zero-bordered plane) or none.
    fn transposes_input_grad(&self) -> bool {
        self.stride == 1 && (self.pad == 0 || self.padded_plane().is_some())
    }
}

/// [`input_grad_batch`] by one product for the micro-batch, `dcols = Δᵀ·W` (`b·T × K`), then
/// col2im, which adds each window's `K` values into the input: at stride 1 with 3-wide windows,
/// three values at a time, each row of a window overlapping the next window's.
fn input_grad_scattered(
    g: &Geometry,
    weights: &[f32],
    (b, dy): (usize, &[f32]),
    (hwc, dcols): (&mut [f32], &mut [f32]),
    dx: &mut [f32],
) {
    let (t, kk, n_in) = (g.positions(), g.patch(), g.cin * g.hin * g.win);
    let cout = weights.len() / kk.max(1);
    // dcols[b·T × K] = Δᵀ[b·T × cout] · W[cout × K], then scatter back
    let hwc = &mut hwc[..b * t * cout];
    transpose_planes(&dy[..b * cout * t], hwc, cout, t, None);
    let dcols = &mut dcols[..b * t * kk];
    let weights = MatRef::row_major(weights, cout, kk);
    matmul(MatMut::row_major(dcols, b * t, kk), MatRef::row_major(hwc, b * t, cout), weights, false);
    col2im_batch(g, dcols, &mut dx[..b * n_in]);
}

/// [`input_grad_batch`] at stride 1, example by example: its column gradients transposed,
/// `dcolsᵀ = Wᵀ·Δ` (`K × T`: Δ is already channel-major, so no transpose of it), then for each
/// row (channel, i, j) of `dcolsᵀ` and each output row, its `wout` values added to the input
/// row they shifted from — whole rows of contiguous values, which vectorise. `dcols` holds one
/// example's `K·T` values.
fn input_grad_transposed(g: &Geometry, weights: &[f32], (b, dy): (usize, &[f32]), dcols: &mut [f32], dx: &mut [f32]) {
    let (t, kk, n_in) = (g.positions(), g.patch(), g.cin * g.hin * g.win);
    let cout = weights.len() / kk.max(1);
    let mut wt = vec![0.0f32; kk * cout];
    transpose(&weights[..cout * kk], &mut wt, cout, kk, None);
    let wt = MatRef::row_major(&wt, kk, cout);
    let padded = g.padded();
    let mut plane = vec![0.0f32; g.padded_plane().unwrap_or(0)];
    let dcols = &mut dcols[..kk * t];
    for (dye, dxe) in dy[..b * cout * t].chunks_exact(cout * t).zip(dx[..b * n_in].chunks_exact_mut(n_in)) {
        matmul(MatMut::row_major(dcols, kk, t), wt, MatRef::row_major(dye, cout, t), false);
        if plane.is_empty() {
            dxe.fill(0.0);
            shift_add(g, dcols, dxe);
        } else {
            plane.fill(0.0);
            shift_add(&padded, dcols, &mut plane);
            g.crop_from(&plane, dxe);
        }
    }
}

/// The adjoint of the im2col at stride 1 and no padding (`g`), from the transposed column
/// gradients `dcols_t` (`K × T`): input row `oh + i` of channel `ch`, from column `j` on,
/// receives row `oh` of `dcols_t`'s row (ch, i, j), for every (ch, i, j) and `oh`. For input
/// rows of at most 16 values in AVX-512 vectors ([`avx512::shift_add`]), otherwise row by row.
fn shift_add(g: &Geometry, dcols_t: &[f32], dx: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::takes_shift_add(g) {
        avx512::shift_add(g, dcols_t, dx);
        return;
    }
    shift_add_rows(g, dcols_t, dx);
}

crate::simd::kernel! {
/// [`shift_add`] row by row (`wout` values at a time), compiled for each instruction set
/// ([`crate::simd`]).
fn shift_add_rows(g: &Geometry, dcols_t: &[f32], dx: &mut [f32]) {
    let Geometry { cin, hin, win, k, hout, wout, .. } = *g;
    let t = hout * wout;
    for ch in 0..cin {
        let plane = &mut dx[ch * hin * win..(ch + 1) * hin * win];
        for i in 0..k {
            for j in 0..k {
                let row = &dcols_t[((ch * k + i) * k + j) * t..][..t];
                for (oh, src) in row.chunks_exact(wout).enumerate() {
                    let dst = &mut plane[(oh + i) * win + j..][..wout];
                    dst.iter_mut().zip(src).for_each(|(d, &v)| *d += v);
                }
            }
        }
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The im2col and col2im a geometry dispatches to (the AVX-512 runs for 4- and 8-wide
    /// windows on a processor with it) give the portable per-segment kernels' values, bit for
    /// bit; so do the plane sums. (On a processor without AVX-512 both sides are portable.)
    #[test]
    fn dispatched_kernels_match_the_portable_ones() {
        for (cin, hin, win, k, stride) in [
            (16, 13, 13, 4, 2),
            (1, 34, 34, 8, 2),
            (3, 9, 11, 4, 1),
            (2, 20, 18, 8, 3),
            (16, 16, 16, 3, 1),
            (2, 9, 7, 3, 2),
        ] {
            let (hout, wout) = ((hin - k) / stride + 1, (win - k) / stride + 1);
            let g = Geometry { cin, hin, win, k, stride, pad: 0, hout, wout };
            let x: Vec<f32> = (0..cin * hin * win).map(|i| ((i * 7) % 11) as f32 * 0.37 - 2.0).collect();
            let c: Vec<f32> = (0..g.positions() * g.patch()).map(|i| ((i * 5) % 13) as f32 * 0.29 - 1.5).collect();
            let (mut got, mut want) = (vec![1.0; c.len()], vec![2.0; c.len()]);
            g.im2col(&x, &mut got);
            g.im2col_k::<0>(&x, &mut want);
            assert_eq!(got, want, "im2col {g:?}");
            let (mut got, mut want) = (vec![0.5; x.len()], vec![0.5; x.len()]);
            g.col2im(&c, &mut got);
            g.col2im_k::<0>(&c, &mut want);
            assert_eq!(got, want, "col2im {g:?}");
        }
        for t in [1, 15, 16, 25, 196] {
            let planes: Vec<f32> = (0..3 * t).map(|i| ((i * 7) % 19) as f32 * 0.13 - 1.1).collect();
            let mut got = [0.0f32; 3];
            plane_sums(&mut got, &planes, t);
            for (s, plane) in got.iter().zip(planes.chunks_exact(t)) {
                let mut lanes = [0.0f32; 16];
                let chunks = plane.chunks_exact(16);
                lanes.iter_mut().zip(chunks.remainder()).for_each(|(l, &v)| *l += v);
                chunks.for_each(|c| lanes.iter_mut().zip(c).for_each(|(l, &v)| *l += v));
                assert_eq!(*s, crate::simd::pairwise_sum(lanes), "t = {t}");
            }
        }
    }

    /// ⟨im2col(x), c⟩ = ⟨x, col2im(c)⟩ for every geometry: the two stay adjoint.
    #[test]
    fn im2col_and_col2im_are_adjoint() {
        for (cin, hin, win, k, stride, pad) in
            // The last two pad at least the kernel's width: the per-segment path (the second
            // would need a plane of 4.4·10¹² values).
            [
                (1, 5, 4, 3, 1, 1),
                (2, 7, 7, 2, 2, 0),
                (3, 6, 5, 4, 2, 3),
                (1, 2, 2, 5, 1, 2),
                (1, 4, 4, 2, 3, 2),
                (1, 28, 28, 1, 1 << 20, 1 << 20),
            ]
        {
            let (hout, wout) = ((hin + 2 * pad - k) / stride + 1, (win + 2 * pad - k) / stride + 1);
            let g = Geometry { cin, hin, win, k, stride, pad, hout, wout };
            let x: Vec<f32> = (0..cin * hin * win).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let c: Vec<f32> = (0..g.positions() * g.patch()).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
            let mut cols = vec![0.0; c.len()];
            g.im2col(&x, &mut cols);
            let mut dx = vec![0.0; x.len()];
            g.col2im(&c, &mut dx);
            let lhs: f32 = cols.iter().zip(&c).map(|(a, b)| a * b).sum();
            let rhs: f32 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "geometry {g:?}");
            // The batch kernels (through a zero-bordered plane when padded) give the same
            // values, bit for bit.
            let mut batch_cols = vec![1.0; c.len()];
            im2col_batch(&g, &x, &mut batch_cols);
            assert_eq!(batch_cols, cols, "geometry {g:?}");
            let mut batch_dx = vec![1.0; x.len()];
            col2im_batch(&g, &c, &mut batch_dx);
            assert_eq!(batch_dx, dx, "geometry {g:?}");
        }
    }

    /// Stride-1 convolutions for the tests comparing two paths: (examples, cin, hin, win, k,
    /// padding, cout), with and without padding, each window size.
    const STRIDE_ONE: [(usize, usize, usize, usize, usize, usize, usize); 5] = [
        (3, 2, 6, 5, 3, 1, 4),
        (2, 16, 14, 14, 3, 1, 16),
        (1, 1, 5, 7, 2, 0, 3),
        (2, 3, 4, 4, 5, 2, 2),
        (1, 2, 3, 3, 1, 0, 5),
    ];

    /// A case of [`STRIDE_ONE`]'s geometry, and weights of small integers (`cout × K`).
    fn stride_one((cin, hin, win, k, pad, cout): (usize, usize, usize, usize, usize, usize)) -> (Geometry, Vec<f32>) {
        let (hout, wout) = (hin + 2 * pad - k + 1, win + 2 * pad - k + 1);
        let g = Geometry { cin, hin, win, k, stride: 1, pad, hout, wout };
        let weights = (0..cout * g.patch()).map(|i| ((i * 3 + i / 5) % 7) as f32 - 3.0).collect();
        (g, weights)
    }

    /// The input gradient at stride 1 through the transposed column gradients equals the one
    /// through col2im: small integers, so that every sum is exact in either order and the two
    /// must agree bit for bit (with and without padding, several examples, each window size).
    #[test]
    fn transposed_input_gradient_equals_col2im() {
        for (b, cin, hin, win, k, pad, cout) in STRIDE_ONE {
            let (g, weights) = stride_one((cin, hin, win, k, pad, cout));
            let (t, kk, n_in) = (g.positions(), g.patch(), cin * hin * win);
            let dy: Vec<f32> = (0..b * cout * t).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
            let (mut hwc, mut dcols) = (vec![0.0; b * t * cout], vec![0.0; b * t * kk]);
            let (mut got, mut want) = (vec![7.0; b * n_in], vec![9.0; b * n_in]);
            input_grad_batch(&g, &weights, (b, &dy), (&mut hwc, &mut dcols), &mut got);
            input_grad_scattered(&g, &weights, (b, &dy), (&mut hwc, &mut dcols), &mut want);
            assert_eq!(got, want, "geometry {g:?}");
        }
    }

    /// At stride 1 the forward and the weight gradients without im2col equal those through it:
    /// small integers, so that every sum is exact in either order and the two must agree bit for
    /// bit (with and without padding, several examples, each window size, a bias or none), with
    /// the buffers that keep each example's plane and take the wide rows full of stale values (NaN)
    /// beforehand.
    #[test]
    fn the_forward_and_weight_rows_without_im2col_equal_those_through_it() {
        if !crate::simd::has_avx512f() {
            return;
        }
        // and padded rows wider than a vector (the plane zeroed, then its interior copied)
        for (b, cin, hin, win, k, pad, cout) in
            STRIDE_ONE.into_iter().chain([(2, 1, 9, 6, 3, 0, 20), (1, 2, 5, 20, 3, 1, 3)])
        {
            let (g, weights) = stride_one((cin, hin, win, k, pad, cout));
            assert!(g.implicit(), "{g:?}");
            let (t, kk, n_in) = (g.positions(), g.patch(), cin * hin * win);
            let bias: Vec<f32> = (0..cout).map(|i| (i % 5) as f32 - 2.0).collect();
            let x: Vec<f32> = (0..b * n_in).map(|i| ((i * 5 + i / 3) % 11) as f32 - 5.0).collect();
            let dy: Vec<f32> = (0..b * cout * t).map(|i| ((i * 7) % 9) as f32 - 4.0).collect();
            for bias in [Some(&bias[..]), None] {
                let (mut want_cols, mut hwc) = (vec![0.0; b * t * kk], vec![0.0; b * t * cout]);
                let (mut got, mut want) = (vec![f32::NAN; b * cout * t], vec![0.0; b * cout * t]);
                let (mut cols, mut wide) = (vec![f32::NAN; b * g.cols_len()], vec![f32::NAN; cout * g.wide().3]);
                forward_implicit(&g, (&weights, bias), (b, &x), (&mut cols, &mut wide), &mut got);
                forward_im2col(&g, (&weights, bias), (b, &x), (&mut want_cols, &mut hwc), &mut want);
                assert_eq!(got, want, "forward {g:?}");
                for e in 0..b {
                    let dye = &dy[e * cout * t..(e + 1) * cout * t];
                    let (mut got, mut want) = (vec![f32::NAN; cout * kk], vec![0.0; cout * kk]);
                    weight_rows_implicit(&g, dye, &cols[e * g.cols_len()..(e + 1) * g.cols_len()], &mut got);
                    let (dye, wcols) =
                        (MatRef::row_major(dye, cout, t), MatRef::row_major(&want_cols[e * t * kk..], t, kk));
                    matmul(MatMut::row_major(&mut want, cout, kk), dye, wcols, false);
                    assert_eq!(got, want, "weight rows {g:?}, example {e}");
                }
            }
        }
    }

    /// The AVX-512 shift-add (one vector per input row, masked lanes) gives the row-by-row
    /// kernel's values bit for bit, on values whose sums round (so that the order shows).
    #[test]
    fn dispatched_shift_add_matches_the_rows() {
        for (cin, hin, win, k) in
            [(2, 6, 5, 3), (16, 16, 16, 3), (1, 5, 7, 2), (3, 4, 4, 1), (2, 9, 16, 5), (1, 3, 3, 3)]
        {
            let g = Geometry { cin, hin, win, k, stride: 1, pad: 0, hout: hin - k + 1, wout: win - k + 1 };
            let d: Vec<f32> =
                (0..g.patch() * g.positions()).map(|i| ((i * 7919) % 1009) as f32 * 0.0137 - 6.9).collect();
            let start: Vec<f32> = (0..cin * hin * win).map(|i| ((i * 31) % 17) as f32 * 0.11 - 0.9).collect();
            let (mut got, mut want) = (start.clone(), start);
            shift_add(&g, &d, &mut got);
            shift_add_rows(&g, &d, &mut want);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "geometry {g:?}");
        }
    }
}
