//! Exact per-example gradients for a micro-batch, on contiguous buffers.
//!
//! The forward pass is batched (one GEMM per layer for the whole micro-batch); the backward
//! pass propagates each example's output gradient with batched GEMMs and writes each
//! example's parameter gradient into its own row of a `[batch × P]` buffer:
//!
//! * linear: ∂ℓᵢ/∂W = δᵢ aᵢᵀ (an outer product), ∂ℓᵢ/∂b = δᵢ;
//! * conv2d: ∂ℓᵢ/∂W = Δᵢᵀ colsᵢ (one small GEMM per example on its im2col matrix),
//!   ∂ℓᵢ/∂b = Σ_positions Δᵢ;
//! * ReLU, tanh, max-pool, flatten: their exact vector-Jacobian products.
//!
//! No autodiff and no per-example weight copies: memory is O(batch × (P + activations)).

use super::gemm::{row_major, sgemm, transposed};
use super::network::{Network, Op};

/// Reusable buffers for one micro-batch (one per worker thread).
#[derive(Debug, Clone)]
pub struct Workspace {
    batch: usize,
    /// `acts[l]` is the input of op `l` (`acts[0]` the network input, channels-last).
    acts: Vec<Vec<f32>>,
    /// im2col matrices of conv layers (empty for other ops).
    cols: Vec<Vec<f32>>,
    /// Channels-last staging for conv GEMM outputs and output gradients.
    hwc: Vec<f32>,
    /// Arg-max input index of every max-pool output (empty for other ops).
    argmax: Vec<Vec<u32>>,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    dcols: Vec<f32>,
}

impl Network {
    /// Bytes of the buffers [`workspace`](Self::workspace) allocates for `batch` examples, or
    /// `None` if that does not fit in a `u64` — checked before anything is allocated.
    #[must_use]
    pub fn workspace_bytes(&self, batch: usize) -> Option<u64> {
        let mut per_example: u64 = self.input_len() as u64;
        let (mut widest, mut dcols, mut hwc) = (self.input_len() as u64, 0u64, 0u64);
        for op in self.ops() {
            let out = op.out_len() as u64;
            widest = widest.max(out);
            per_example = per_example.checked_add(out)?;
            match *op {
                Op::Conv { cin, k, hout, wout, .. } => {
                    let cols =
                        (hout as u64).checked_mul(wout as u64)?.checked_mul(cin as u64)?.checked_mul((k * k) as u64)?;
                    per_example = per_example.checked_add(cols)?;
                    dcols = dcols.max(cols);
                    hwc = hwc.max(out);
                }
                Op::MaxPool { .. } => per_example = per_example.checked_add(out)?,
                _ => {}
            }
        }
        // acts + cols + argmax, hwc, two gradient buffers, dcols; 4 bytes each
        let per_example = per_example.checked_add(hwc)?.checked_add(widest.checked_mul(2)?)?.checked_add(dcols)?;
        per_example.checked_mul(batch as u64)?.checked_mul(4)
    }

    /// Buffers for micro-batches of up to `batch` examples.
    #[must_use]
    pub fn workspace(&self, batch: usize) -> Workspace {
        let mut acts = vec![vec![0.0; batch * self.input_len()]];
        let mut cols = Vec::new();
        let mut argmax = Vec::new();
        let mut widest = self.input_len();
        let mut dcols = 0;
        let mut hwc = 0;
        for op in self.ops() {
            acts.push(vec![0.0; batch * op.out_len()]);
            widest = widest.max(op.out_len());
            let (c, a) = match *op {
                Op::Conv { cin, k, hout, wout, .. } => {
                    dcols = dcols.max(hout * wout * cin * k * k);
                    hwc = hwc.max(op.out_len());
                    (hout * wout * cin * k * k, 0)
                }
                Op::MaxPool { .. } => (0, op.out_len()),
                _ => (0, 0),
            };
            cols.push(vec![0.0; batch * c]);
            argmax.push(vec![0u32; batch * a]);
        }
        Workspace {
            batch,
            acts,
            cols,
            hwc: vec![0.0; batch * hwc],
            argmax,
            grad_a: vec![0.0; batch * widest],
            grad_b: vec![0.0; batch * widest],
            dcols: vec![0.0; batch * dcols],
        }
    }

    /// Forward pass of `b` examples (`x`: `b × input_len`, channel-major like the dataset).
    /// Returns the logits, `b × classes`.
    pub fn forward<'w>(&self, theta: &[f32], ws: &'w mut Workspace, x: &[f32], b: usize) -> &'w [f32] {
        // Internal: callers size x, θ and the workspace from this network (never from input).
        assert!(b <= ws.batch && x.len() == b * self.input_len() && theta.len() == self.num_params());
        ws.acts[0][..x.len()].copy_from_slice(x);
        for (l, op) in self.ops().iter().enumerate() {
            let (inputs, outputs) = ws.acts.split_at_mut(l + 1);
            let input = &inputs[l];
            let out = &mut outputs[0][..b * op.out_len()];
            match *op {
                Op::Conv { cin, cout, k, stride, pad, hin, win, hout, wout, w, b: bias } => {
                    let (t, kk) = (hout * wout, cin * k * k);
                    let cols = &mut ws.cols[l][..b * t * kk];
                    for e in 0..b {
                        im2col(
                            &input[e * hin * win * cin..(e + 1) * hin * win * cin],
                            &mut cols[e * t * kk..(e + 1) * t * kk],
                            (cin, hin, win),
                            (k, stride, pad, hout, wout),
                        );
                    }
                    // hwc[b·T × cout] = cols[b·T × K] · Wᵀ (W is [cout × K] row-major), then to [cout, T]
                    let hwc = &mut ws.hwc[..b * t * cout];
                    sgemm(
                        b * t,
                        cout,
                        kk,
                        hwc,
                        row_major(cout),
                        false,
                        cols,
                        row_major(kk),
                        &theta[w..],
                        transposed(kk),
                    );
                    hwc_to_chw(hwc, out, cout, t);
                    if let Some(bo) = bias {
                        for (plane, bv) in out.chunks_exact_mut(t).zip(theta[bo..bo + cout].iter().cycle()) {
                            plane.iter_mut().for_each(|v| *v += bv);
                        }
                    }
                }
                Op::Linear { din, dout, w, b: bias } => {
                    sgemm(
                        b,
                        dout,
                        din,
                        out,
                        row_major(dout),
                        false,
                        &input[..b * din],
                        row_major(din),
                        &theta[w..],
                        transposed(din),
                    );
                    if let Some(bo) = bias {
                        add_bias(out, &theta[bo..bo + dout]);
                    }
                }
                Op::Relu { len } => {
                    for (o, i) in out.iter_mut().zip(&input[..b * len]) {
                        *o = i.max(0.0);
                    }
                }
                Op::Tanh { len } => {
                    for (o, i) in out.iter_mut().zip(&input[..b * len]) {
                        *o = i.tanh();
                    }
                }
                Op::MaxPool { c, k, stride, hin, win, hout, wout } => {
                    let am = &mut ws.argmax[l][..b * op.out_len()];
                    for e in 0..b {
                        let (inp, o, a) = (
                            &input[e * hin * win * c..(e + 1) * hin * win * c],
                            &mut out[e * op.out_len()..(e + 1) * op.out_len()],
                            &mut am[e * op.out_len()..(e + 1) * op.out_len()],
                        );
                        max_pool(inp, o, a, (c, hin, win), (k, stride, hout, wout));
                    }
                }
                Op::Flatten { .. } => out.copy_from_slice(&input[..out.len()]),
            }
        }
        &ws.acts[self.ops().len()][..b * self.classes()]
    }

    /// Per-example gradients of the cross-entropy loss ℓ(θ; xᵢ, yᵢ) for the `b` examples of
    /// the last [`forward`](Self::forward), written row by row into `grads` (`b × P`).
    /// Returns the per-example losses in `losses[..b]`.
    pub fn backward(&self, theta: &[f32], ws: &mut Workspace, labels: &[u8], grads: &mut [f32], losses: &mut [f32]) {
        let b = labels.len();
        let p = self.num_params();
        // Internal: as in `forward`, every size comes from this network.
        assert!(b <= ws.batch && grads.len() >= b * p && losses.len() >= b);
        let classes = self.classes();
        let logits = &ws.acts[self.ops().len()][..b * classes];
        let mut d_out = std::mem::take(&mut ws.grad_a);
        let mut d_in = std::mem::take(&mut ws.grad_b);
        for e in 0..b {
            losses[e] = softmax_xent_grad(
                &logits[e * classes..(e + 1) * classes],
                labels[e] as usize,
                &mut d_out[e * classes..],
            );
        }
        // The first op that has parameters: nothing before it needs a gradient.
        let first_param =
            self.ops().iter().position(|op| matches!(op, Op::Conv { .. } | Op::Linear { .. })).unwrap_or(0);
        for (l, op) in self.ops().iter().enumerate().rev() {
            let need_input_grad = l > first_param;
            let input = &ws.acts[l];
            let output = &ws.acts[l + 1];
            let n_in = input.len() / ws.batch;
            let n_out = op.out_len();
            let (dy, dx) = (&mut d_out[..b * n_out], &mut d_in[..b * n_in]);
            match *op {
                Op::Conv { cin, cout, k, stride, pad, hin, win, hout, wout, w, b: bias } => {
                    let (t, kk) = (hout * wout, cin * k * k);
                    let cols = &ws.cols[l];
                    for e in 0..b {
                        let g = &mut grads[e * p..(e + 1) * p];
                        let dye = &dy[e * t * cout..(e + 1) * t * cout];
                        // ∂W[cout × K] = Δ[cout × T] · cols[T × K]
                        sgemm(
                            cout,
                            kk,
                            t,
                            &mut g[w..],
                            row_major(kk),
                            false,
                            dye,
                            row_major(t),
                            &cols[e * t * kk..],
                            row_major(kk),
                        );
                        if let Some(bo) = bias {
                            for (gb, plane) in g[bo..bo + cout].iter_mut().zip(dye.chunks_exact(t)) {
                                *gb = plane.iter().sum();
                            }
                        }
                    }
                    if need_input_grad {
                        // dcols[b·T × K] = Δᵀ[b·T × cout] · W[cout × K], then scatter back
                        let hwc = &mut ws.hwc[..b * t * cout];
                        chw_to_hwc(dy, hwc, cout, t);
                        let dcols = &mut ws.dcols[..b * t * kk];
                        sgemm(
                            b * t,
                            kk,
                            cout,
                            dcols,
                            row_major(kk),
                            false,
                            hwc,
                            row_major(cout),
                            &theta[w..],
                            row_major(kk),
                        );
                        dx.iter_mut().for_each(|v| *v = 0.0);
                        for e in 0..b {
                            col2im(
                                &dcols[e * t * kk..(e + 1) * t * kk],
                                &mut dx[e * n_in..(e + 1) * n_in],
                                (cin, hin, win),
                                (k, stride, pad, hout, wout),
                            );
                        }
                    }
                }
                Op::Linear { din, dout, w, b: bias } => {
                    for e in 0..b {
                        let g = &mut grads[e * p..(e + 1) * p];
                        let (a, d) = (&input[e * din..(e + 1) * din], &dy[e * dout..(e + 1) * dout]);
                        for (o, &dov) in d.iter().enumerate() {
                            for (gw, &av) in g[w + o * din..w + (o + 1) * din].iter_mut().zip(a) {
                                *gw = dov * av;
                            }
                        }
                        if let Some(bo) = bias {
                            g[bo..bo + dout].copy_from_slice(d);
                        }
                    }
                    if need_input_grad {
                        sgemm(
                            b,
                            din,
                            dout,
                            dx,
                            row_major(din),
                            false,
                            dy,
                            row_major(dout),
                            &theta[w..],
                            row_major(din),
                        );
                    }
                }
                Op::Relu { .. } => {
                    for ((x, &d), &y) in dx.iter_mut().zip(dy.iter()).zip(&output[..b * n_out]) {
                        *x = if y > 0.0 { d } else { 0.0 };
                    }
                }
                Op::Tanh { .. } => {
                    for ((x, &d), &y) in dx.iter_mut().zip(dy.iter()).zip(&output[..b * n_out]) {
                        *x = d * (1.0 - y * y);
                    }
                }
                Op::MaxPool { .. } => {
                    dx.iter_mut().for_each(|v| *v = 0.0);
                    let am = &ws.argmax[l];
                    for e in 0..b {
                        let dxe = &mut dx[e * n_in..(e + 1) * n_in];
                        for (&i, &d) in am[e * n_out..(e + 1) * n_out].iter().zip(&dy[e * n_out..(e + 1) * n_out]) {
                            dxe[i as usize] += d;
                        }
                    }
                }
                Op::Flatten { .. } => dx.copy_from_slice(dy),
            }
            if l == first_param {
                break;
            }
            std::mem::swap(&mut d_out, &mut d_in);
        }
        ws.grad_a = d_out;
        ws.grad_b = d_in;
    }
}

/// Softmax cross-entropy: writes ∂ℓ/∂z = softmax(z) − onehot(y) and returns ℓ = −log softmax(z)_y.
fn softmax_xent_grad(z: &[f32], y: usize, d: &mut [f32]) -> f32 {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for (di, &zi) in d.iter_mut().zip(z) {
        *di = (zi - m).exp();
        sum += *di;
    }
    for di in d[..z.len()].iter_mut() {
        *di /= sum;
    }
    d[y] -= 1.0;
    sum.ln() - (z[y] - m)
}

fn add_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        for (o, b) in row.iter_mut().zip(bias) {
            *o += b;
        }
    }
}

/// `[c, hw]` → `[hw, c]` per example.
fn chw_to_hwc(src: &[f32], dst: &mut [f32], c: usize, hw: usize) {
    if c == 1 || hw == 1 {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    for (s, d) in src.chunks_exact(c * hw).zip(dst.chunks_exact_mut(c * hw)) {
        for ch in 0..c {
            for p in 0..hw {
                d[p * c + ch] = s[ch * hw + p];
            }
        }
    }
}

/// `[hw, c]` → `[c, hw]` per example.
fn hwc_to_chw(src: &[f32], dst: &mut [f32], c: usize, hw: usize) {
    if c == 1 || hw == 1 {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    for (s, d) in src.chunks_exact(c * hw).zip(dst.chunks_exact_mut(c * hw)) {
        for p in 0..hw {
            for ch in 0..c {
                d[ch * hw + p] = s[p * c + ch];
            }
        }
    }
}

/// One example's im2col from a channel-major `[cin, hin, win]` input: row t = (oh, ow),
/// column (ch, i, j) — the weight layout's order. Each (ch, i) row segment is a contiguous
/// copy of k input values (zero outside the padded border).
fn im2col(
    x: &[f32],
    cols: &mut [f32],
    (cin, hin, win): (usize, usize, usize),
    (k, s, pad, hout, wout): (usize, usize, usize, usize, usize),
) {
    let kk = cin * k * k;
    for oh in 0..hout {
        for ow in 0..wout {
            let row = &mut cols[(oh * wout + ow) * kk..(oh * wout + ow + 1) * kk];
            let w0 = (ow * s) as isize - pad as isize;
            // columns j in [j_lo, j_hi) fall inside the input
            let j_lo = (-w0).clamp(0, k as isize) as usize;
            let j_hi = (win as isize - w0).clamp(0, k as isize) as usize;
            for ch in 0..cin {
                for i in 0..k {
                    let seg = &mut row[(ch * k + i) * k..(ch * k + i + 1) * k];
                    let ih = (oh * s + i) as isize - pad as isize;
                    if ih < 0 || ih as usize >= hin || j_lo >= j_hi {
                        seg.fill(0.0);
                        continue;
                    }
                    let src = (ch * hin + ih as usize) * win;
                    seg[..j_lo].fill(0.0);
                    let a = (w0 + j_lo as isize) as usize;
                    seg[j_lo..j_hi].copy_from_slice(&x[src + a..src + a + (j_hi - j_lo)]);
                    seg[j_hi..].fill(0.0);
                }
            }
        }
    }
}

/// Adjoint of [`im2col`]: scatter-adds column gradients back onto the channel-major input gradient.
fn col2im(
    dcols: &[f32],
    dx: &mut [f32],
    (cin, hin, win): (usize, usize, usize),
    (k, s, pad, hout, wout): (usize, usize, usize, usize, usize),
) {
    let kk = cin * k * k;
    for oh in 0..hout {
        for ow in 0..wout {
            let row = &dcols[(oh * wout + ow) * kk..(oh * wout + ow + 1) * kk];
            let w0 = (ow * s) as isize - pad as isize;
            let j_lo = (-w0).clamp(0, k as isize) as usize;
            let j_hi = (win as isize - w0).clamp(0, k as isize) as usize;
            if j_lo >= j_hi {
                continue;
            }
            for ch in 0..cin {
                for i in 0..k {
                    let ih = (oh * s + i) as isize - pad as isize;
                    if ih < 0 || ih as usize >= hin {
                        continue;
                    }
                    let seg = &row[(ch * k + i) * k + j_lo..(ch * k + i) * k + j_hi];
                    let dst = (ch * hin + ih as usize) * win + (w0 + j_lo as isize) as usize;
                    for (d, v) in dx[dst..dst + seg.len()].iter_mut().zip(seg) {
                        *d += v;
                    }
                }
            }
        }
    }
}

/// One example's channel-major max pool, recording the arg-max input index of each output.
fn max_pool(
    x: &[f32],
    out: &mut [f32],
    argmax: &mut [u32],
    (c, hin, win): (usize, usize, usize),
    (k, s, hout, wout): (usize, usize, usize, usize),
) {
    for ch in 0..c {
        let plane = &x[ch * hin * win..(ch + 1) * hin * win];
        for oh in 0..hout {
            for ow in 0..wout {
                let o = (ch * hout + oh) * wout + ow;
                let first = (oh * s) * win + ow * s;
                let (mut best, mut best_v) = (first, plane[first]);
                for i in 0..k {
                    let r = (oh * s + i) * win + ow * s;
                    for (j, &v) in plane[r..r + k].iter().enumerate() {
                        if v > best_v {
                            (best, best_v) = (r + j, v);
                        }
                    }
                }
                out[o] = best_v;
                argmax[o] = (ch * hin * win + best) as u32;
            }
        }
    }
}
