//! A micro-batch's per-example gradient rows kept on the burn device that computed them, for
//! the clip to run there ([`crate::clip::kept`] states the argument; this file is its device
//! side). On a GPU: the parameters' rows concatenated into one `[batch, P']` tensor (P values
//! and a few zeros), each row's squared norm summed in blocks on the device and bounded on the
//! host, and the live rows scaled, rounded and summed in integers on the device; only `batch`
//! norms go to the host and only P' < P + 2⌈√P⌉ integers come back per micro-batch. On the CPU
//! backends the same steps run over the rows in host memory, by dpgd's host kernels.

use burn::tensor::ops::PadMode;
use burn::tensor::{Int, Tensor, TensorData};

use crate::clip::kept::{blocked_square_sum, norm_block, norm_roundings, squared_norm_bound};
use crate::clip::{KeptRows, Rows};
use crate::cube::Kernel;

/// A micro-batch's rows where the engine computed them, in θ's layout, for the clip to run
/// there: on a GPU (any device but flex and ndarray) one `[batch, P']` tensor (P values and a
/// few zeros up to whole blocks of the norm's sum, P' − P < [`norm_block`]`(P)`), so that each
/// phase of the clip is a handful of kernels over the whole micro-batch whatever the number of
/// parameters; on the CPU backends, where the device's memory is the host's, the rows in host
/// memory for dpgd's host kernels ([`Kernel::HostClip`]; burn's tensor operations there
/// otherwise, as [`in_tensors`](Self::in_tensors) forces).
#[derive(Debug, Default)]
pub struct DeviceRows {
    rows: Stored,
    p: usize,
}

/// Where [`DeviceRows`] holds its rows (one value per worker thread, so a tensor's size inline
/// costs nothing worth a box).
#[derive(Debug, Default)]
#[allow(clippy::large_enum_variant)]
enum Stored {
    /// No parameter's rows: every value is 0.
    #[default]
    Empty,
    /// `[batch, P']` on the device.
    Tensor(Tensor<2>),
    /// `batch` rows of P values in host memory, row-major (the buffer is kept for the next
    /// micro-batch).
    Host { values: Vec<f32>, b: usize },
}

impl DeviceRows {
    /// Rows made of `parts` side by side (θ's layout): each `(rows, n)` with rows of shape
    /// `[batch, n]` in f32 or f64 (`None`: the loss does not reach that parameter; its n values
    /// are zeros), every part's rows on one device and of one batch size. On the CPU backends
    /// the rows are copied into host memory (f32) for dpgd's host kernels, unless
    /// [`Kernel::HostClip`] is [`disable`](crate::cube::disable)d; elsewhere they are
    /// concatenated on the device.
    #[must_use]
    pub fn new(parts: Vec<(Option<Tensor<2>>, usize)>) -> Self {
        let mut rows = Self::default();
        rows.set(parts);
        rows
    }

    /// [`new`](Self::new) with the rows concatenated on the device whatever it is: the clip by
    /// burn's tensor operations (what a GPU runs where dpgd's kernels decline), for tests and
    /// comparisons on the CPU backends.
    #[must_use]
    pub fn in_tensors(parts: Vec<(Option<Tensor<2>>, usize)>) -> Self {
        let p = parts.iter().map(|&(_, n)| n).sum();
        Self { rows: concatenated(parts, p), p }
    }

    /// Replaces the rows with those of `parts`, as [`new`](Self::new) would make them, reusing
    /// this value's host buffer (the CPU backends: no allocation per micro-batch).
    pub fn set(&mut self, parts: Vec<(Option<Tensor<2>>, usize)>) {
        let p = parts.iter().map(|&(_, n)| n).sum();
        let found = parts.iter().find_map(|(r, _)| r.as_ref().map(|r| (r.dims()[0], r.device())));
        let Some((b, device)) = found.filter(|_| p > 0) else {
            *self = Self { rows: Stored::Empty, p };
            return;
        };
        if !crate::cube::runs(Kernel::HostClip, &device) {
            *self = Self { rows: concatenated(parts, p), p };
            return;
        }
        let mut values = match std::mem::take(&mut self.rows) {
            Stored::Host { values, .. } => values,
            _ => Vec::new(),
        };
        // Every column is written below (values, zeros or NaN): no need to clear the old rows.
        values.resize(b * p, 0.0);
        write_parts(parts, b, p, &mut values);
        *self = Self { rows: Stored::Host { values, b }, p };
    }

    /// Upper bounds of the `b` rows' exact squared norms ([`crate::clip::kept`] step 1), and the
    /// values of `with` (`[b]`, e.g. the losses) read back in the same copy.
    ///
    /// Each row's [`blocked_squares`] over its P values (on the host for rows held there:
    /// [`blocked_square_sum`]), bounded on the host ([`squared_norm_bound`]). A row with a NaN
    /// or infinite value, or squares past f32's range, gets an infinite bound; values that
    /// cannot be read read as NaN (non-finite either way: charged, never summed). Rows with no
    /// values have the bound 0.
    #[must_use]
    pub fn squared_norm_bounds(&self, b: usize, with: Tensor<1>) -> (Vec<f64>, Vec<f64>) {
        let (k, p) = (norm_block(self.p), self.p);
        let roundings = norm_roundings(p, k);
        let with = with.reshape([b, 1]);
        match &self.rows {
            Stored::Empty => (vec![0.0; b], read_f64(with, b)),
            Stored::Host { values, b: rows } if *rows == b => {
                let bound = |row: &[f32]| squared_norm_bound(f64::from(blocked_square_sum(row, k)), p, roundings);
                (values.chunks_exact(p).map(bound).collect(), read_f64(with, b))
            }
            Stored::Host { .. } => (vec![f64::NAN; b], read_f64(with, b)),
            Stored::Tensor(rows) => {
                let host = read_f64(Tensor::cat(vec![blocked_squares_of(rows.clone(), p), with], 1), 2 * b);
                host.chunks_exact(2).map(|v| (squared_norm_bound(v[0], p, roundings), v[1])).unzip()
            }
        }
    }
}

/// `parts` (as [`DeviceRows::new`] takes them, P values in all) concatenated on their device
/// into `[batch, P']`, with zeros up to whole blocks of the norm's sum written by the
/// concatenation itself (a separate padding of the squares would copy all of them once more);
/// empty where no part has rows.
fn concatenated(parts: Vec<(Option<Tensor<2>>, usize)>, p: usize) -> Stored {
    let Some((b, device, dtype)) =
        parts.iter().find_map(|(r, _)| r.as_ref().map(|r| (r.dims()[0], r.device(), r.dtype())))
    else {
        return Stored::Empty;
    };
    let mut columns: Vec<Tensor<2>> = parts
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(rows, n)| rows.unwrap_or_else(|| Tensor::zeros([b, n], (&device, dtype))))
        .collect();
    let tail = padded_width(p) - p;
    if tail > 0 && !columns.is_empty() {
        columns.push(Tensor::zeros([b, tail], (&device, dtype)));
    }
    let rows = if columns.len() > 1 { Some(Tensor::cat(columns, 1)) } else { columns.into_iter().next() };
    rows.map_or(Stored::Empty, Stored::Tensor)
}

/// Writes each part's `[b, n]` rows (f32, or converted to f32) into its columns of `out`
/// (`b` rows of `p` values, θ's layout; a part with no rows gets zeros): what a CPU backend's
/// rows cost to gather, one copy. A part whose values cannot be read, or that has a shape
/// other than `[b, n]`, reads as NaN (non-finite: charged, never summed).
pub(crate) fn write_parts(parts: Vec<(Option<Tensor<2>>, usize)>, b: usize, p: usize, out: &mut [f32]) {
    let mut offset = 0;
    for (rows, n) in parts {
        let columns = offset..offset + n;
        offset += n;
        if n == 0 {
            continue;
        }
        let values = rows.map(|r| r.into_data().convert::<f32>().try_into_vec::<f32>());
        let rows_of = out.chunks_exact_mut(p).take(b);
        match values {
            None => rows_of.for_each(|row| row[columns.clone()].fill(0.0)),
            Some(Ok(v)) if v.len() == b * n => {
                rows_of.zip(v.chunks_exact(n)).for_each(|(row, v)| row[columns.clone()].copy_from_slice(v));
            }
            Some(_) => rows_of.for_each(|row| row[columns.clone()].fill(f32::NAN)),
        }
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

    /// Where the rows are: on the host (the CPU backends) by the host clip's kernel, each
    /// product exact in f64 and rounded once to an integer, added in 64-bit integers. On the
    /// device over the whole `[batch, P']` tensor, read back once: on a CubeCL device (wgpu)
    /// dpgd's own kernel ([`crate::cube::clip_sum`]) in one read of the rows; elsewhere burn's
    /// operations: the live rows (`select`, skipped when every row is live in order), times
    /// their factors, rounded (half to even) and converted to integers, summed over the
    /// micro-batch.
    fn sum_rounded(&mut self, live: &[(usize, f32)], sum: &mut [i64]) {
        sum.fill(0);
        if live.is_empty() {
            return;
        }
        let rows = match &self.rows {
            Stored::Empty => return,
            Stored::Host { values, b } => {
                let live: Vec<(usize, f64)> =
                    live.iter().filter(|&&(r, _)| r < *b).map(|&(r, f)| (r, f64::from(f))).collect();
                Rows::dense(values, self.p).add_rounded(&live, sum);
                return;
            }
            Stored::Tensor(rows) => rows,
        };
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
