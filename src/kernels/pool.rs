//! Pooling on the host, for the burn engine's pooling layers on flex (`dpgd::nn::MaxPool2d` and
//! `AvgPool2d`), valid padding and floor mode: max pooling's maximum and arg-max over each
//! window, from which its backward follows (flex's rule for ties and NaN: the first maximum; a
//! NaN wins, the last NaN of a window), and average pooling and its backward, each value formed
//! by the same additions in the same order as flex's (so equal to burn's bit for bit).
// Used by the burn engine's pooling on flex only.
#![cfg_attr(not(feature = "flex"), allow(dead_code))]

crate::simd::kernel! {
    /// For each of `planes` planes of `h × w` values, each window's maximum and its arg-max (its
    /// index in the plane, which the caller keeps below 2³²), valid padding, floor mode; with the
    /// output size. The window offsets are the outer loops and an output row the inner one, so
    /// that the comparisons run along contiguous values, compiled for each instruction set
    /// ([`crate::simd`]): at SSE2 alone it was a fifth of the Opacus CNN's private step on the
    /// burn engine (`perf`, 2 cores). Each maximum is the value at its arg-max, bit for bit (the
    /// running maxima are copies of the values).
    pub(crate) fn max_with_argmax(
        x: &[f32],
        [planes, h, w]: [usize; 3],
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [dh, dw]: [usize; 2],
    ) -> (Vec<f32>, Vec<u32>, [usize; 2]) {
        let (ho, wo) = ((h - dh * (kh - 1) - 1) / sh + 1, (w - dw * (kw - 1) - 1) / sw + 1);
        let (mut values, mut out) = (vec![0.0f32; planes * ho * wo], vec![0u32; planes * ho * wo]);
        if sh == 1 && sw == 1 {
            max_with_argmax_flat(x, (&mut values, &mut out), [planes, h, w], [ho, wo], [kh, kw], [dh, dw]);
            return (values, out, [ho, wo]);
        }
        let planes_out = values.chunks_exact_mut(ho * wo).zip(out.chunks_exact_mut(ho * wo));
        for (plane, (values, out)) in x.chunks_exact(h * w).zip(planes_out).take(planes) {
            for (oy, (best, at)) in values.chunks_exact_mut(wo).zip(out.chunks_exact_mut(wo)).enumerate() {
                for ky in 0..kh {
                    let row = (oy * sh + ky * dh) * w;
                    for kx in 0..kw {
                        let first = ky == 0 && kx == 0;
                        let start = row + kx * dw;
                        if sw == 1 {
                            // Contiguous values: equal-length slices, no bounds check per value.
                            let line = &plane[start..start + wo];
                            for (j, ((best, at), &v)) in best.iter_mut().zip(at.iter_mut()).zip(line).enumerate() {
                                select(first, v, (start + j) as u32, best, at);
                            }
                        } else {
                            for (ox, (best, at)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
                                let i = start + ox * sw;
                                select(first, plane[i], i as u32, best, at);
                            }
                        }
                    }
                }
            }
        }
        (values, out, [ho, wo])
    }
}

/// [`max_with_argmax`] at stride 1: a window at output (oy, ox) starts at oy·w + ox of its
/// plane, so every window offset (ky·dh·w + kx·dw) is one pass over the plane's values
/// flattened — runs of (ho − 1)·w + wo values instead of output rows of wo — the windows' values
/// visited in the same order (window rows, then columns), so the same maxima and arg-maxes; each
/// output reads its position.
#[inline(always)]
fn max_with_argmax_flat(
    x: &[f32],
    (values, out): (&mut [f32], &mut [u32]),
    [planes, h, w]: [usize; 3],
    [ho, wo]: [usize; 2],
    [kh, kw]: [usize; 2],
    [dh, dw]: [usize; 2],
) {
    let flat = (ho - 1) * w + wo;
    let (mut best, mut at) = (vec![0.0f32; flat], vec![0u32; flat]);
    let planes_out = values.chunks_exact_mut(ho * wo).zip(out.chunks_exact_mut(ho * wo));
    for (plane, (values, out)) in x.chunks_exact(h * w).zip(planes_out).take(planes) {
        for ky in 0..kh {
            for kx in 0..kw {
                let (first, start) = (ky == 0 && kx == 0, ky * dh * w + kx * dw);
                let line = &plane[start..start + flat];
                for (j, ((best, at), &v)) in best.iter_mut().zip(at.iter_mut()).zip(line).enumerate() {
                    select(first, v, (start + j) as u32, best, at);
                }
            }
        }
        for (oy, (vrow, row)) in values.chunks_exact_mut(wo).zip(out.chunks_exact_mut(wo)).enumerate() {
            vrow.copy_from_slice(&best[oy * w..oy * w + wo]);
            row.copy_from_slice(&at[oy * w..oy * w + wo]);
        }
    }
}

/// flex's rule for one more value `v` at `i` of a window: the first maximum; a NaN wins (the
/// last NaN of the window). Written as selects rather than branches.
#[inline(always)]
fn select(first: bool, v: f32, i: u32, best: &mut f32, at: &mut u32) {
    let take = first | (v > *best) | v.is_nan();
    *best = if take { v } else { *best };
    *at = if take { i } else { *at };
}

crate::simd::kernel! {
    /// Average pooling of `planes` planes of `h × w` values (valid padding, floor mode), into
    /// `out` (`planes · ho · wo`): each window's values added row by row from 0, then divided by
    /// the window's size — flex's order; an output row at a time. Returns the output size.
    pub(crate) fn average(
        x: &[f32],
        out: &mut [f32],
        [planes, h, w]: [usize; 3],
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
    ) -> [usize; 2] {
        let (ho, wo) = ((h - kh) / sh + 1, (w - kw) / sw + 1);
        let count = (kh * kw) as f32;
        for (plane, out) in x.chunks_exact(h * w).zip(out.chunks_exact_mut(ho * wo)).take(planes) {
            for (oy, row) in out.chunks_exact_mut(wo).enumerate() {
                row.fill(0.0);
                for ky in 0..kh {
                    let line = &plane[(oy * sh + ky) * w..][..w];
                    if sw == kw && kw == 2 {
                        // Side by side in pairs (the common 2×2 window at stride 2): the same two
                        // additions, in a loop the compiler vectorises.
                        for (o, pair) in row.iter_mut().zip(line.chunks_exact(2)) {
                            *o = (*o + pair[0]) + pair[1];
                        }
                    } else if sw == kw {
                        // Side by side: each window row is the next kw values (no index arithmetic).
                        for (o, window) in row.iter_mut().zip(line.chunks_exact(kw)) {
                            window.iter().for_each(|&v| *o += v);
                        }
                    } else {
                        for (ox, o) in row.iter_mut().enumerate() {
                            line[ox * sw..ox * sw + kw].iter().for_each(|&v| *o += v);
                        }
                    }
                }
                row.iter_mut().for_each(|o| *o /= count);
            }
        }
        [ho, wo]
    }
}

crate::simd::kernel! {
    /// The input gradient of [`average`] into `dx` (overwritten): each output's gradient divided
    /// by the window's size and added to each of its window's inputs, outputs in order — flex's
    /// order, so the same sums where windows overlap.
    pub(crate) fn average_backward(
        dy: &[f32],
        dx: &mut [f32],
        [planes, h, w]: [usize; 3],
        [kh, kw]: [usize; 2],
        [sh, sw]: [usize; 2],
    ) {
        let (ho, wo) = ((h - kh) / sh + 1, (w - kw) / sw + 1);
        let count = (kh * kw) as f32;
        let mut share = vec![0.0f32; wo];
        dx.fill(0.0);
        for (dx, dy) in dx.chunks_exact_mut(h * w).zip(dy.chunks_exact(ho * wo)).take(planes) {
            for (oy, row) in dy.chunks_exact(wo).enumerate() {
                share.iter_mut().zip(row).for_each(|(s, &g)| *s = g / count);
                for ky in 0..kh {
                    let line = &mut dx[(oy * sh + ky) * w..][..w];
                    if sw == kw && kw == 2 {
                        // In pairs, as in the forward.
                        for (&s, pair) in share.iter().zip(line.chunks_exact_mut(2)) {
                            pair[0] += s;
                            pair[1] += s;
                        }
                    } else if sw == kw {
                        for (&s, window) in share.iter().zip(line.chunks_exact_mut(kw)) {
                            window.iter_mut().for_each(|d| *d += s);
                        }
                    } else {
                        for (ox, &s) in share.iter().enumerate() {
                            line[ox * sw..ox * sw + kw].iter_mut().for_each(|d| *d += s);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host path's windows by hand: the first maximum wins a tie, a NaN wins, the last NaN.
    #[test]
    fn argmax_by_hand() {
        let x = [1.0, 3.0, 3.0, 0.0, 2.0, f32::NAN, 5.0, 1.0, f32::NAN];
        let (values, idx, size) = max_with_argmax(&x, [1, 3, 3], [2, 2], [1, 1], [1, 1]);
        assert_eq!((&idx, size), (&vec![1, 5, 6, 8], [2, 2]));
        // each maximum is the value at its arg-max, bit for bit (NaN included)
        let at: Vec<u32> = idx.iter().map(|&i| x[i as usize].to_bits()).collect();
        assert_eq!(values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), at);
        // and at stride 2 (windows side by side): one window of the top-left 2 × 2
        let (values, idx, size) = max_with_argmax(&x, [1, 3, 3], [2, 2], [2, 2], [1, 1]);
        assert_eq!((values, idx, size), (vec![3.0], vec![1], [1, 1]));
    }

    /// Average pooling by hand: overlapping windows (stride 1) share their inputs' gradients.
    #[test]
    fn average_by_hand() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [0.0; 2];
        assert_eq!(average(&x, &mut out, [1, 2, 3], [2, 2], [1, 1]), [1, 2]);
        assert_eq!(out, [3.0, 4.0]);
        let mut dx = [9.0; 6];
        average_backward(&[4.0, 8.0], &mut dx, [1, 2, 3], [2, 2], [1, 1]);
        assert_eq!(dx, [1.0, 3.0, 2.0, 1.0, 3.0, 2.0]);
    }
}
