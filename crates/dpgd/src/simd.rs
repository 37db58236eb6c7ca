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

/// Whether this processor has AVX-512F, for the kernels written with its intrinsics (the
/// engine's products, transposes and pools; each has a portable path beside it). Detected once,
/// then a cached load.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f")
}
