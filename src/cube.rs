//! dpgd's own kernels on burn's CubeCL backends (wgpu in dpgd's build), for the parts of the
//! private step that burn's operations leave slow on a GPU (profiled on an H200:
//! `experiments/speed/results/2026-11-27-h200-kernels`; a micro-batch of 2,048 spent 4.5 ms in
//! its kernels):
//!
//! - [`clip_sum`]: the clip's integer sum of the live rows in one read of them (burn's
//!   operations take four passes: scale, round, convert, sum; 0.49 ms);
//! - [`block_square_sums`]: the rows' squared norms in blocks in one read of them (0.24 ms);
//! - [`conv_weight_rows`]: a convolution's per-example weight gradients straight from the
//!   layer's input and output gradient, without forming its patch matrices (burn's batched
//!   product of `[b, c_out, L]` by `[b, L, c_in·kh·kw]` ran at 0.7–1.8 TFLOPS there: 1.7 ms for
//!   the Opacus CNN's two convolutions).
//!
//! [`Kernel`] also names the CPU backends' host clip ([`Kernel::HostClip`]: the kept rows'
//! norms and clipped sum in host memory, where flex and ndarray hold them), so that one switch
//! ([`disable`]) compares any of dpgd's kernels with burn's operations.
//!
//! Each returns `None` on a device these kernels do not run on (flex, ndarray, or a build
//! without wgpu), or where [`disable`] turned it off: the caller then uses burn's tensor
//! operations, which compute the same values ([`clip_sum`] bit for bit; the others up to f32's
//! rounding of sums in another order, within the same bound for the norms). The kernels are
//! written once in CubeCL and reach burn through its backend-extension API
//! (`#[backend_extension]`), which registers them as operations of burn's kernel fusion on the
//! calling thread's stream, so several threads on one device stay ordered. Their tests
//! (`tests/cube_kernels.rs`) check them against their definitions computed on the host.

use std::sync::atomic::{AtomicU8, Ordering};

use burn::tensor::{Device, Int, Tensor};

/// One of dpgd's kernels, by the function that launches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// [`clip_sum`].
    ClipSum,
    /// [`block_square_sums`].
    BlockSquareSums,
    /// [`conv_weight_rows`].
    ConvWeightRows,
    /// On the CPU backends (flex, ndarray): the kept rows' squared norms and clipped sum
    /// computed in host memory, where those backends hold the rows, by dpgd's host kernels
    /// (`crate::clip::kept::blocked_square_sum`, the host clip's integer sum) instead of burn's
    /// tensor operations (`crate::per_example::DeviceRows`).
    HostClip,
}

impl Kernel {
    /// Every kernel.
    pub const ALL: [Kernel; 4] = [Kernel::ClipSum, Kernel::BlockSquareSums, Kernel::ConvWeightRows, Kernel::HostClip];

    /// Its name on the command line (`dpgd bench-step --without-kernels`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kernel::ClipSum => "clip-sum",
            Kernel::BlockSquareSums => "block-square-sums",
            Kernel::ConvWeightRows => "conv-weight-rows",
            Kernel::HostClip => "host-clip",
        }
    }

    /// Whether it runs on `device` when not [`disable`]d: [`Kernel::HostClip`] on the CPU
    /// backends, the others on a CubeCL device ([`runs_on`]).
    #[must_use]
    pub fn runs_on(self, device: &Device) -> bool {
        match self {
            Kernel::HostClip => crate::device::is_host(device),
            _ => runs_on(device),
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The kernels [`disable`] turned off in this process.
static DISABLED: AtomicU8 = AtomicU8::new(0);

/// Leaves the work of `kernels` to burn's operations in this process from now on (every kernel
/// runs by default): for benchmarks that compare the two in one build.
pub fn disable(kernels: &[Kernel]) {
    for k in kernels {
        DISABLED.fetch_or(k.bit(), Ordering::Relaxed);
    }
}

/// Whether `kernel` runs on `device`: [`Kernel::runs_on`] it, and not [`disable`]d.
#[must_use]
pub fn runs(kernel: Kernel, device: &Device) -> bool {
    DISABLED.load(Ordering::Relaxed) & kernel.bit() == 0 && kernel.runs_on(device)
}

/// The geometry of a 2-D convolution for [`conv_weight_rows`]: kernel `[kh, kw]`, stride,
/// dilation, the padding before each axis (`[top, left]`; the padding after needs no value:
/// the output's size says where the windows stop) and the number of groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// `[kh, kw]`.
    pub kernel: [usize; 2],
    /// `[sh, sw]`.
    pub stride: [usize; 2],
    /// `[dh, dw]`.
    pub dilation: [usize; 2],
    /// Zeros before the first row and the first column.
    pub pad_before: [usize; 2],
    /// Groups (both channel counts divisible by it).
    pub groups: usize,
}

/// Σᵢ round(factorᵢ·rows\[positionᵢ\]) over the `live` rows (`(position, factor)`), as 32-bit
/// integers on the device: `[width]` for rows of `[batch, width]`. Each product is one f32
/// multiplication, rounded half to even and converted to i32 (the operations burn's
/// `(rows * factors).round().int()` performs, in one kernel), and the integers are added
/// exactly: per column, partial sums of up to 64 rows each (enough threads for a GPU at
/// micro-batches of a few hundred and more), then those partial sums (integer addition is
/// exact in any order below overflow, which the caller's grid rules out: `crate::clip::kept`). `None` where the kernel does not run on the rows' device, when
/// there are no live rows, or when the rows are not f32.
#[must_use]
pub fn clip_sum(rows: &Tensor<2>, live: &[(usize, f32)]) -> Option<Tensor<1, Int>> {
    if live.is_empty() || !runs(Kernel::ClipSum, &rows.device()) {
        return None;
    }
    imp::clip_sum(rows, live)
}

/// Each row's squares added in `width / block` blocks of `block` values (`[b, width / block]`,
/// f32): block t of a row holds its values t, t + m, t + 2m, … (m blocks, so that the threads
/// of neighbouring blocks read neighbouring values), squared and added in that order; values
/// past the rows' own width count as zeros. What [`crate::clip::kept`]'s step 1 bounds: every
/// square passes through at most `block` roundings in its block (one more where the square is
/// not fused into the addition), then the blocks' sum. `None` where the kernel does not run on
/// the rows' device, or where `width` is not a whole number of blocks at least the rows' width.
#[must_use]
pub fn block_square_sums(rows: &Tensor<2>, block: usize, width: usize) -> Option<Tensor<2>> {
    if !runs(Kernel::BlockSquareSums, &rows.device())
        || block == 0
        || !width.is_multiple_of(block)
        || width < rows.dims()[1]
    {
        return None;
    }
    imp::block_square_sums(rows, block, width)
}

/// Each example's weight gradient of a 2-D convolution, `[b, c_out, (c_in/groups)·kh·kw]` in
/// the weight's layout, from the layer's input `x` (`[b, c_in, h, w]`, unpadded) and its output
/// gradient `delta` (`[b, c_out, ho, wo]`): entry (n, o, c, i, j) is
/// Σ over output positions (y, x) of delta\[n, o, y, x\]·x\[n, g·c_in/groups + c, y·sh + i·dh − top,
/// x·sw + j·dw − left\] (zero outside the input), g the group of o, summed in f32 in row-major
/// order of the positions. `None` where the kernel does not run on the tensors' device, or where
/// the shapes disagree (batch, channels not divisible by the groups, a size of 0).
#[must_use]
pub fn conv_weight_rows(x: &Tensor<4>, delta: &Tensor<4>, geometry: ConvGeometry) -> Option<Tensor<3>> {
    if !runs(Kernel::ConvWeightRows, &x.device()) {
        return None;
    }
    imp::conv_weight_rows(x, delta, geometry)
}

/// Whether the CubeCL kernels run on `device`: a CubeCL device (wgpu), autodiff or not (whether
/// one of them is turned off or not: [`runs`]).
#[must_use]
pub fn runs_on(device: &Device) -> bool {
    cfg!(feature = "wgpu") && !crate::device::is_host(device)
}

#[cfg(not(feature = "wgpu"))]
mod imp {
    use super::{ConvGeometry, Int, Tensor};

    pub(super) fn clip_sum(_: &Tensor<2>, _: &[(usize, f32)]) -> Option<Tensor<1, Int>> {
        None
    }

    pub(super) fn conv_weight_rows(_: &Tensor<4>, _: &Tensor<4>, _: ConvGeometry) -> Option<Tensor<3>> {
        None
    }

    pub(super) fn block_square_sums(_: &Tensor<2>, _: usize, _: usize) -> Option<Tensor<2>> {
        None
    }
}

#[cfg(feature = "wgpu")]
mod kernels;
#[cfg(feature = "wgpu")]
use kernels as imp;
