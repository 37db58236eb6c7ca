//! A micro-batch's per-example gradient rows kept on the burn device that computed them, for
//! the clip to run there ([`crate::clip::kept`] states the argument; this file is its device
//! side): each row's squared norm summed in blocks on the device and bounded on the host, and
//! the live rows scaled, rounded and summed in integers on the device. Only `batch` norms go
//! to the host and only P integers come back per micro-batch.

use burn::tensor::ops::PadMode;
use burn::tensor::{Int, Tensor, TensorData};

use crate::clip::KeptRows;
use crate::clip::kept::{norm_block, norm_roundings, squared_norm_bound, sum_of_bounds};

/// A micro-batch's rows on the device, in θ's order: each part a trainable parameter's
/// `[batch, n]` per-example gradients (`None`: the loss does not reach it; its n values are
/// zeros).
#[derive(Debug, Default)]
pub struct DeviceRows {
    parts: Vec<(Option<Tensor<2>>, usize)>,
    p: usize,
}

impl DeviceRows {
    /// Rows made of `parts` side by side (θ's layout): each `(rows, n)` with rows of shape
    /// `[batch, n]` in f32 or f64, every part's rows on one device and of one batch size.
    #[must_use]
    pub fn new(parts: Vec<(Option<Tensor<2>>, usize)>) -> Self {
        let p = parts.iter().map(|&(_, n)| n).sum();
        Self { parts, p }
    }

    /// Upper bounds of the `b` rows' exact squared norms ([`crate::clip::kept`] step 1), and the
    /// values of `with` (`[b]`, e.g. the losses) read back in the same copy.
    ///
    /// The device computes each part's [`blocked_squares`]; the host bounds each part from its
    /// length and adds the bounds ([`squared_norm_bound`], [`sum_of_bounds`]). A row with a NaN
    /// or infinite value, or squares past f32's range, gets an infinite bound; values that
    /// cannot be read read as NaN (non-finite either way: charged, never summed).
    #[must_use]
    pub fn squared_norm_bounds(&self, b: usize, with: Tensor<1>) -> (Vec<f64>, Vec<f64>) {
        let present: Vec<(&Tensor<2>, usize)> =
            self.parts.iter().filter_map(|(r, n)| r.as_ref().map(|r| (r, *n))).collect();
        let mut columns: Vec<Tensor<2>> = present.iter().map(|(r, _)| blocked_squares((*r).clone())).collect();
        columns.push(with.reshape([b, 1]));
        let k = columns.len();
        let host = match Tensor::cat(columns, 1).into_data().convert::<f64>().try_into_vec::<f64>() {
            Ok(v) if v.len() == b * k => v,
            _ => vec![f64::NAN; b * k],
        };
        let bound =
            |(&(_, n), &sq): (&(&Tensor<2>, usize), &f64)| squared_norm_bound(sq, n, norm_roundings(n, norm_block(n)));
        host.chunks_exact(k).map(|row| (sum_of_bounds(present.iter().zip(row).map(bound)), row[k - 1])).unzip()
    }
}

impl KeptRows for DeviceRows {
    fn p(&self) -> usize {
        self.p
    }

    /// Per part on the device: the live rows (`select`), times their factors, rounded (half to
    /// even) and converted to integers, summed over the micro-batch; the parts' sums
    /// concatenated in θ's order and read back once.
    fn sum_rounded(&mut self, live: &[(usize, f32)], sum: &mut [i64]) {
        sum.fill(0);
        let Some(device) = self.parts.iter().find_map(|(r, _)| r.as_ref().map(Tensor::device)) else { return };
        if live.is_empty() {
            return;
        }
        let l = live.len();
        let positions: Vec<i64> = live.iter().map(|&(r, _)| r as i64).collect();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(positions, [l]), &device);
        let factors = Tensor::<2>::from_data(TensorData::new(live.iter().map(|&(_, f)| f).collect(), [l, 1]), &device);
        let sums: Vec<Tensor<1, Int>> = self
            .parts
            .iter()
            .filter(|&&(_, n)| n > 0)
            .map(|(rows, n)| match rows {
                Some(rows) => {
                    let scaled = rows.clone().select(0, idx.clone()) * factors.clone();
                    scaled.round().int().sum_dim(0).reshape([*n])
                }
                None => Tensor::<1, Int>::zeros([*n], &device),
            })
            .collect();
        if sums.is_empty() {
            return;
        }
        if let Ok(values) = Tensor::cat(sums, 0).into_data().convert::<i64>().try_into_vec::<i64>()
            && values.len() == sum.len()
        {
            sum.copy_from_slice(&values);
        }
    }
}

/// Each row's sum of squares on the device, in blocks ([`crate::clip::kept`] step 1): the
/// squares (one multiplication each: `x * x`, correctly rounded everywhere, where a power
/// function need not be), zero-padded to whole blocks of [`norm_block`] values (adding zeros is
/// exact), added within each block, then the blocks added: `[batch, 1]`.
#[must_use]
pub fn blocked_squares(rows: Tensor<2>) -> Tensor<2> {
    let [b, n] = rows.dims();
    let k = norm_block(n);
    let m = n.div_ceil(k).max(1);
    let squares = rows.clone() * rows;
    let squares = if m * k > n { squares.pad([(0, m * k - n)], PadMode::Constant(0.0)) } else { squares };
    squares.reshape([b, m, k]).sum_dim(2).sum_dim(1).reshape([b, 1])
}
