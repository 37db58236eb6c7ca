//! Exact per-example gradients for a micro-batch, on contiguous buffers.
//!
//! The forward pass is batched (one GEMM per layer for the whole micro-batch); the backward
//! pass propagates each example's output gradient with batched GEMMs and writes each
//! example's parameter gradient into its own row of a `[batch × P]` buffer, layer by layer
//! ([`super::layers`]: one file per rule). No autodiff and no per-example weight copies: memory
//! is O(batch × (P + activations)).

use super::layers::{Backward, Forward, LayerScratch, Shared};
use super::loss::softmax_xent_grad;
use super::network::Network;

/// Reusable buffers for one micro-batch (one per worker thread).
#[derive(Debug, Clone)]
pub struct Workspace {
    batch: usize,
    /// `acts[l]` is the input of layer `l` (`acts[0]` the network input).
    acts: Vec<Vec<f32>>,
    own: Vec<LayerScratch>,
    shared: Shared,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
}

impl Network {
    /// Bytes of the buffers [`workspace`](Self::workspace) allocates for `batch` examples, or
    /// `None` if that does not fit in a `u64` — checked before anything is allocated.
    #[must_use]
    pub fn workspace_bytes(&self, batch: usize) -> Option<u64> {
        let mut per_example: u64 = self.input_len() as u64;
        let (mut widest, mut hwc, mut dcols) = (self.input_len() as u64, 0u64, 0u64);
        for layer in self.layers() {
            let (out, needs) = (layer.out_len() as u64, layer.needs());
            widest = widest.max(out);
            per_example =
                per_example.checked_add(out)?.checked_add(needs.cols as u64)?.checked_add(needs.argmax as u64)?;
            hwc = hwc.max(needs.hwc as u64);
            dcols = dcols.max(needs.dcols as u64);
        }
        // acts + cols + argmax, then hwc, two gradient buffers and dcols; 4 bytes each
        let per_example = per_example.checked_add(hwc)?.checked_add(widest.checked_mul(2)?)?.checked_add(dcols)?;
        per_example.checked_mul(batch as u64)?.checked_mul(4)
    }

    /// Buffers for micro-batches of up to `batch` examples.
    #[must_use]
    pub fn workspace(&self, batch: usize) -> Workspace {
        let mut acts = vec![vec![0.0; batch * self.input_len()]];
        let mut own = Vec::with_capacity(self.layers().len());
        let (mut widest, mut hwc, mut dcols) = (self.input_len(), 0, 0);
        for layer in self.layers() {
            let needs = layer.needs();
            acts.push(vec![0.0; batch * layer.out_len()]);
            own.push(LayerScratch { cols: vec![0.0; batch * needs.cols], argmax: vec![0; batch * needs.argmax] });
            widest = widest.max(layer.out_len());
            hwc = hwc.max(needs.hwc);
            dcols = dcols.max(needs.dcols);
        }
        Workspace {
            batch,
            acts,
            own,
            shared: Shared { hwc: vec![0.0; batch * hwc], dcols: vec![0.0; batch * dcols] },
            grad_a: vec![0.0; batch * widest],
            grad_b: vec![0.0; batch * widest],
        }
    }

    /// Forward pass of `b` examples (`x`: `b × input_len`, channel-major like the dataset).
    /// Returns the logits, `b × classes`.
    pub fn forward<'w>(&self, theta: &[f32], ws: &'w mut Workspace, x: &[f32], b: usize) -> &'w [f32] {
        // Internal: callers size x, θ and the workspace from this network (never from input).
        assert!(b <= ws.batch && x.len() == b * self.input_len() && theta.len() == self.num_params());
        ws.acts[0][..x.len()].copy_from_slice(x);
        for (l, layer) in self.layers().iter().enumerate() {
            let (inputs, outputs) = ws.acts.split_at_mut(l + 1);
            let input = &inputs[l];
            let output = &mut outputs[0][..b * layer.out_len()];
            layer.forward(Forward { theta, input, output, b, own: &mut ws.own[l], shared: &mut ws.shared });
        }
        &ws.acts[self.layers().len()][..b * self.classes()]
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
        let mut d_out = std::mem::take(&mut ws.grad_a);
        let mut d_in = std::mem::take(&mut ws.grad_b);
        let logits = &ws.acts[self.layers().len()][..b * classes];
        for e in 0..b {
            let z = &logits[e * classes..(e + 1) * classes];
            losses[e] = softmax_xent_grad(z, usize::from(labels[e]), &mut d_out[e * classes..]);
        }
        // The first layer with parameters: nothing before it needs a gradient.
        let first = self.first_with_params();
        for (l, layer) in self.layers().iter().enumerate().rev() {
            let n_in = ws.acts[l].len() / ws.batch;
            let n_out = layer.out_len();
            layer.backward(Backward {
                theta,
                input: &ws.acts[l],
                output: &ws.acts[l + 1],
                dy: &d_out[..b * n_out],
                dx: (l > first).then(|| &mut d_in[..b * n_in]),
                grads,
                p,
                b,
                own: &ws.own[l],
                shared: &mut ws.shared,
            });
            if l == first {
                break;
            }
            std::mem::swap(&mut d_out, &mut d_in);
        }
        ws.grad_a = d_out;
        ws.grad_b = d_in;
    }
}
