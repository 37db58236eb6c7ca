//! A micro-batch's per-example gradient rows kept on the burn device that computed them, for
//! the clip to run there ([`crate::clip::kept`] states the argument; this file is its device
//! side): the parameters' rows concatenated into one `[batch, P']` tensor (P values and a few
//! zeros), each row's squared norm summed in blocks on the device and bounded on the host, and
//! the live rows scaled, rounded and summed in integers on the device. Only `batch` norms go to
//! the host and only P' < P + 2⌈√P⌉ integers come back per micro-batch.

use burn::tensor::ops::PadMode;
use burn::tensor::{Int, Tensor, TensorData};

use crate::clip::KeptRows;
use crate::clip::kept::{norm_block, norm_roundings, squared_norm_bound};

/// A micro-batch's rows on the device as one `[batch, P']` tensor in θ's layout (P values, then
/// zeros up to whole blocks of the norm's sum, P' − P < [`norm_block`]`(P)`), so that each
/// phase of the clip is a handful of kernels over the whole micro-batch whatever the number of
/// parameters (one per parameter and operation before: about 70 launches per micro-batch for
/// the Opacus CNN's 8 parameters).
#[derive(Debug, Default)]
pub struct DeviceRows {
    rows: Option<Tensor<2>>,
    p: usize,
}

impl DeviceRows {
    /// Rows made of `parts` side by side (θ's layout), concatenated on the device: each
    /// `(rows, n)` with rows of shape `[batch, n]` in f32 or f64 (`None`: the loss does not reach
    /// that parameter; its n values are zeros), every part's rows on one device and of one batch
    /// size.
    #[must_use]
    pub fn new(parts: Vec<(Option<Tensor<2>>, usize)>) -> Self {
        let p = parts.iter().map(|&(_, n)| n).sum();
        let Some((b, device, dtype)) =
            parts.iter().find_map(|(r, _)| r.as_ref().map(|r| (r.dims()[0], r.device(), r.dtype())))
        else {
            return Self { rows: None, p };
        };
        let mut columns: Vec<Tensor<2>> = parts
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(rows, n)| rows.unwrap_or_else(|| Tensor::zeros([b, n], (&device, dtype))))
            .collect();
        // Zeros up to whole blocks of the norm's sum, written by the concatenation itself (a
        // separate padding of the squares would copy all of them once more).
        let tail = padded_width(p) - p;
        if tail > 0 && !columns.is_empty() {
            columns.push(Tensor::zeros([b, tail], (&device, dtype)));
        }
        let rows = if columns.len() > 1 { Some(Tensor::cat(columns, 1)) } else { columns.into_iter().next() };
        Self { rows, p }
    }

    /// Upper bounds of the `b` rows' exact squared norms ([`crate::clip::kept`] step 1), and the
    /// values of `with` (`[b]`, e.g. the losses) read back in the same copy.
    ///
    /// The device computes each row's [`blocked_squares`] over its P values; the host bounds it
    /// ([`squared_norm_bound`]). A row with a NaN or infinite value, or squares past f32's
    /// range, gets an infinite bound; values that cannot be read read as NaN (non-finite either
    /// way: charged, never summed). Rows with no values have the bound 0.
    #[must_use]
    pub fn squared_norm_bounds(&self, b: usize, with: Tensor<1>) -> (Vec<f64>, Vec<f64>) {
        let with = with.reshape([b, 1]);
        let Some(rows) = &self.rows else {
            return (vec![0.0; b], read_f64(with, b));
        };
        let host = read_f64(Tensor::cat(vec![blocked_squares_of(rows.clone(), self.p), with], 1), 2 * b);
        let roundings = norm_roundings(self.p, norm_block(self.p));
        host.chunks_exact(2).map(|v| (squared_norm_bound(v[0], self.p, roundings), v[1])).unzip()
    }
}

/// A tensor's `n` values on the host as f64; NaN if they cannot be read.
fn read_f64<const D: usize>(t: Tensor<D>, n: usize) -> Vec<f64> {
    match t.into_data().convert::<f64>().try_into_vec::<f64>() {
        Ok(v) if v.len() == n => v,
        _ => vec![f64::NAN; n],
    }
}

impl KeptRows for DeviceRows {
    fn p(&self) -> usize {
        self.p
    }

    /// On the device, over the whole `[batch, P']` tensor, and read back once: on a CubeCL device
    /// (wgpu) dpgd's own kernel ([`crate::cube::clip_sum`]) in one read of the rows; elsewhere
    /// burn's operations: the live rows (`select`, skipped when every row is live in order),
    /// times their factors, rounded (half to even) and converted to integers, summed over the
    /// micro-batch.
    fn sum_rounded(&mut self, live: &[(usize, f32)], sum: &mut [i64]) {
        sum.fill(0);
        let Some(rows) = &self.rows else { return };
        if live.is_empty() {
            return;
        }
        if let Some(sums) = crate::cube::clip_sum(rows, live) {
            read_sums(sums, sum);
            return;
        }
        let (l, device) = (live.len(), rows.device());
        let factors = Tensor::<2>::from_data(TensorData::new(live.iter().map(|&(_, f)| f).collect(), [l, 1]), &device);
        let all_in_order = l == rows.dims()[0] && live.iter().enumerate().all(|(i, &(r, _))| r == i);
        let rows = if all_in_order {
            rows.clone()
        } else {
            let positions: Vec<i64> = live.iter().map(|&(r, _)| r as i64).collect();
            rows.clone().select(0, Tensor::<1, Int>::from_data(TensorData::new(positions, [l]), &device))
        };
        read_sums((rows * factors).round().int().sum_dim(0), sum);
    }
}

/// The device's integer sums (`[P']` or `[1, P']`) into `sum` (P values): the padding's columns
/// (zeros, so their sums are 0) are read back and left out; a sum that cannot be read leaves
/// `sum` at 0.
fn read_sums<const D: usize>(sums: Tensor<D, Int>, sum: &mut [i64]) {
    if let Ok(values) = sums.into_data().convert::<i64>().try_into_vec::<i64>()
        && values.len() == padded_width(sum.len())
    {
        sum.copy_from_slice(&values[..sum.len()]);
    }
}

/// Each row's sum of squares on the device, in blocks ([`crate::clip::kept`] step 1): the
/// squares (one multiplication each: `x * x`, correctly rounded everywhere, where a power
/// function need not be), zero-padded to whole blocks of [`norm_block`] values (adding zeros is
/// exact), added within each block, then the blocks added: `[batch, 1]`.
#[must_use]
pub fn blocked_squares(rows: Tensor<2>) -> Tensor<2> {
    let n = rows.dims()[1];
    blocked_squares_of(rows, n)
}

/// The width of a row of `len` values padded with zeros to whole blocks of [`norm_block`]`(len)`.
fn padded_width(len: usize) -> usize {
    let k = norm_block(len);
    len.div_ceil(k).max(1) * k
}

/// [`blocked_squares`] of rows whose first `len` values are the row and whose other values (up
/// to at most [`padded_width`]`(len)`) are zeros: blocks of [`norm_block`]`(len)`, so the
/// padding changes no sum and no block. On a CubeCL device (wgpu) dpgd's kernel forms the
/// blocks' sums in one read of the rows, each block from every m-th value
/// ([`crate::cube::block_square_sums`]: as many blocks of as many values, so the same bound).
fn blocked_squares_of(rows: Tensor<2>, len: usize) -> Tensor<2> {
    let [b, n] = rows.dims();
    let (k, width) = (norm_block(len), padded_width(len));
    if let Some(blocks) = crate::cube::block_square_sums(&rows, k, width) {
        return blocks.sum_dim(1);
    }
    let squares = rows.clone() * rows;
    let squares = if width > n { squares.pad([(0, width - n)], PadMode::Constant(0.0)) } else { squares };
    squares.reshape([b, width / k, k]).sum_dim(2).sum_dim(1).reshape([b, 1])
}
