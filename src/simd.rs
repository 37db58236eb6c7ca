//! The instruction sets the hot kernels are compiled for: `kernel!` compiles a
//! function once per level below and picks, at run time, the first the processor has (through
//! the `multiversion` crate): AVX-512 (F, BW, DQ, VL), AVX2 with FMA, else the build's baseline.
//! A release build targets baseline x86-64 (SSE2) so that it runs anywhere; without this, the
//! compiler vectorises a kernel's loops four floats wide on a machine with sixteen.
//!
//! Every variant of a `kernel!` function computes the same values: the kernels use IEEE
//! arithmetic in a fixed order and Rust never fuses a multiply and an add on its own (so the
//! sum's sensitivity argument, which rests on each example's own rounded row, does not depend on
//! which variant ran). The matrix products run in a hand-written AVX-512 kernel where the
//! processor has it and in the `gemm` crate's kernels otherwise, each with its own order of
//! accumulation: a fixed-seed run is reproducible bit for bit on one machine (at any thread
//! count), not across machines with different instruction sets.

/// Wraps a free function so that it is compiled for AVX-512 and AVX2 as well as the baseline,
/// and dispatched at run time. Functions it calls should be `#[inline]` so that they are
/// compiled into each variant.
macro_rules! kernel {
    ($(#[$meta:meta])* $vis:vis fn $($rest:tt)*) => {
        $(#[$meta])*
        #[::multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
        $vis fn $($rest)*
    };
}

pub(crate) use kernel;

/// The sum of `lanes` added pairwise in a fixed tree (lane i with lane i + N/2, and so on down;
/// `N` a power of two): the same value on every variant and run, and no chain of N dependent
/// additions at the end of a lane-wise sum. Kernels call it for their running lanes.
#[inline(always)]
pub(crate) fn pairwise_sum<T: Copy + std::ops::AddAssign, const N: usize>(mut lanes: [T; N]) -> T {
    debug_assert!(N.is_power_of_two());
    let mut width = N / 2;
    while width > 0 {
        let (low, high) = lanes.split_at_mut(width);
        low.iter_mut().zip(&high[..width]).for_each(|(l, &h)| *l += h);
        width /= 2;
    }
    lanes[0]
}

/// Σ `x` over 16 running lanes (added in [`pairwise_sum`]'s fixed tree), then the
/// tail.
#[inline(always)]
pub(crate) fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    pairwise_sum(lanes) + tail
}

/// Σ `f(x, y)` over pairs, as [`lane_sum`].
#[inline(always)]
pub(crate) fn lane_sum2(x: &[f32], y: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (cx, cy) = (x.chunks_exact(16), y.chunks_exact(16));
    let tail: f32 = cx.remainder().iter().zip(cy.remainder()).map(|(&a, &b)| f(a, b)).sum();
    for (a, b) in cx.zip(cy) {
        for ((l, &u), &v) in lanes.iter_mut().zip(a).zip(b) {
            *l += f(u, v);
        }
    }
    pairwise_sum(lanes) + tail
}

/// The AVX-512 mask of the first `n` of 16 lanes (all 16 for `n ≥ 16`): a last partial vector.
#[inline(always)]
pub(crate) fn first_lanes(n: usize) -> u16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// Whether this processor has AVX-512F, for the kernels written with its intrinsics (the
/// engine's products, transposes and pools; each has a portable path beside it). Detected once,
/// then a cached load.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// [`pairwise_sum`] of a vector's 16 lanes, in the same tree (so the same value as the portable
/// kernels' running lanes): halves added to halves down to one lane.
///
/// # Safety
/// The processor has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn pairwise_sum_ps(v: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::{
        _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps, _mm256_castpd_ps,
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm512_castps_pd, _mm512_castps512_ps256,
        _mm512_extractf64x4_pd,
    };
    // lane i + lane i + 8, then i + 4, i + 2, i + 1
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let v8 = _mm256_add_ps(_mm512_castps512_ps256(v), high);
    let v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps::<1>(v8));
    let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps::<1>(v2, v2)))
}
