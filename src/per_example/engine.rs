//! Exact per-example gradients for a micro-batch, on contiguous buffers.
//!
//! The forward pass is batched (one GEMM per layer for the whole micro-batch); the backward
//! pass propagates each example's output gradient with batched GEMMs and writes each
//! example's parameter gradient into its own row of a `[batch × P]` buffer, layer by layer
//! ([`super::layers`]: one file per rule) — except, for the clip, the blocks that are outer
//! products (the linear layers' weights), left as their two factors
//! ([`Network::backward_for_clip`]). No autodiff and no per-example weight copies: memory
//! is O(batch × (P + activations)).

use std::time::{Duration, Instant};

use super::layers::{Backward, Forward, LayerScratch, Shared};
use super::loss::softmax_xent_grad;
use super::network::Network;
use crate::clip::Outer;

/// One layer's wall time in a [`Network::profile`] pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerTimes {
    /// Its forward pass.
    pub forward: Duration,
    /// Its backward pass: input gradient and per-example parameter gradients (an outer-product
    /// block only its factors, as training computes it).
    pub backward: Duration,
}

/// Values per example of a layer's kept output gradient: its outer block's δ, if it has one.
fn delta_len(layer: &super::Layer) -> usize {
    layer.outer().map_or(0, |o| o.dout)
}

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
    /// For each layer whose output a later layer adds (a residual connection), the output
    /// gradient that comes back through the join, summed in the backward pass; empty for the
    /// others.
    joined: Vec<Vec<f32>>,
}

impl Network {
    /// Bytes of the buffers [`workspace`](Self::workspace) allocates for `batch` examples, or
    /// `None` if that does not fit in a `u64` — checked before anything is allocated.
    #[must_use]
    pub fn workspace_bytes(&self, batch: usize) -> Option<u64> {
        let mut per_example: u64 = self.input_len() as u64;
        let (mut widest, mut hwc, mut dcols) = (self.input_len() as u64, 0u64, 0u64);
        for (l, layer) in self.layers().iter().enumerate() {
            let (out, needs, delta) = (layer.out_len() as u64, layer.needs(), delta_len(layer) as u64);
            widest = widest.max(out);
            let joined = if self.is_joined(l) { out } else { 0 };
            per_example = per_example
                .checked_add(out)?
                .checked_add(joined)?
                .checked_add(needs.cols as u64)?
                .checked_add(needs.argmax as u64)?
                .checked_add(delta)?;
            hwc = hwc.max(needs.hwc as u64);
            dcols = dcols.max(needs.dcols as u64);
        }
        // acts + joined + cols + argmax + delta, then hwc, two gradient buffers and dcols; 4 bytes each
        let per_example = per_example.checked_add(hwc)?.checked_add(widest.checked_mul(2)?)?.checked_add(dcols)?;
        per_example.checked_mul(batch as u64)?.checked_mul(4)
    }

    /// Buffers for micro-batches of up to `batch` examples.
    #[must_use]
    pub fn workspace(&self, batch: usize) -> Workspace {
        let mut acts = vec![vec![0.0; batch * self.input_len()]];
        let mut own = Vec::with_capacity(self.layers().len());
        let (mut widest, mut hwc, mut dcols) = (self.input_len(), 0, 0);
        let joined = (0..self.layers().len())
            .map(|l| if self.is_joined(l) { vec![0.0; batch * self.layers()[l].out_len()] } else { Vec::new() })
            .collect();
        for layer in self.layers() {
            let needs = layer.needs();
            acts.push(vec![0.0; batch * layer.out_len()]);
            own.push(LayerScratch {
                cols: vec![0.0; batch * needs.cols],
                argmax: vec![0; batch * needs.argmax],
                delta: vec![0.0; batch * delta_len(layer)],
            });
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
            joined,
        }
    }

    /// Forward pass of `b` examples (`x`: `b × input_len`, channel-major like the dataset).
    /// Returns the logits, `b × classes`.
    pub fn forward<'w>(&self, theta: &[f32], ws: &'w mut Workspace, x: &[f32], b: usize) -> &'w [f32] {
        self.forward_timed(theta, ws, x, b, None)
    }

    /// [`forward`](Self::forward), adding each layer's time to `times[l].forward` when given.
    fn forward_timed<'w>(
        &self,
        theta: &[f32],
        ws: &'w mut Workspace,
        x: &[f32],
        b: usize,
        mut times: Option<&mut [LayerTimes]>,
    ) -> &'w [f32] {
        // Internal: callers size x, θ and the workspace from this network (never from input).
        assert!(b <= ws.batch && x.len() == b * self.input_len() && theta.len() == self.num_params());
        ws.acts[0][..x.len()].copy_from_slice(x);
        for (l, layer) in self.layers().iter().enumerate() {
            let (inputs, outputs) = ws.acts.split_at_mut(l + 1);
            let input = &inputs[l];
            let output = &mut outputs[0][..b * layer.out_len()];
            let start = times.is_some().then(Instant::now);
            layer.forward(Forward { theta, input, output, b, own: &mut ws.own[l], shared: &mut ws.shared });
            // A residual connection: the earlier layer's output (an input of a layer before
            // this one, so in `inputs`) is added.
            if let Some(j) = self.joins()[l] {
                add_into(output, &inputs[j + 1][..output.len()]);
            }
            if let (Some(t), Some(start)) = (times.as_deref_mut(), start) {
                t[l].forward += start.elapsed();
            }
        }
        &ws.acts[self.layers().len()][..b * self.classes()]
    }

    /// Per-example gradients of the cross-entropy loss ℓ(θ; xᵢ, yᵢ) for the `b` examples of
    /// the last [`forward`](Self::forward), written row by row into `grads` (`b × P`).
    /// Returns the per-example losses in `losses[..b]`.
    pub fn backward(&self, theta: &[f32], ws: &mut Workspace, labels: &[u8], grads: &mut [f32], losses: &mut [f32]) {
        self.backward_timed(theta, ws, labels, grads, losses, None, false, None);
    }

    /// [`backward`](Self::backward), and each row's squared norm into `norms[..b]`: each layer's
    /// part of the row, added up by the layer as it writes it where its rule does so (the linear
    /// and conv layers), else from the values just written ([`Layer::squared_norm`](super::Layer::squared_norm)),
    /// over the layers with parameters, whose parts tile the row ([`Network::new`] checks).
    pub fn backward_with_norms(
        &self,
        theta: &[f32],
        ws: &mut Workspace,
        labels: &[u8],
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) {
        self.backward_timed(theta, ws, labels, grads, losses, Some(norms), false, None);
    }

    /// [`backward_with_norms`](Self::backward_with_norms) for the clip: the weight gradients
    /// of the layers that are outer products ([`Layer::outer`](super::Layer), the linear ones)
    /// are left unwritten in `grads` and returned as their factors (δᵢ kept by the layer, aᵢ its
    /// input), with their squared norms from the factors. The clip multiplies them out exactly
    /// as it adds them ([`crate::clip::Rows`]).
    pub fn backward_for_clip<'w>(
        &self,
        theta: &[f32],
        ws: &'w mut Workspace,
        labels: &[u8],
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Vec<Outer<'w>> {
        self.backward_timed(theta, ws, labels, grads, losses, Some(norms), true, None);
        let b = labels.len();
        let ws: &'w Workspace = ws;
        // A layer with an outer block keeps its factors only when it adds its own norms (the
        // `factored` condition in `backward_timed`); one without would leave stale factors.
        debug_assert!(self.layers().iter().all(|l| l.outer().is_none() || l.adds_norms()));
        let blocks = self.layers().iter().enumerate().filter_map(|(l, layer)| layer.outer().map(|o| (l, o)));
        blocks
            .map(|(l, o)| Outer {
                at: o.at,
                dout: o.dout,
                din: o.din,
                delta: &ws.own[l].delta[..b * o.dout],
                input: &ws.acts[l][..b * o.din],
            })
            .collect()
    }

    /// [`forward`](Self::forward) then [`backward_for_clip`](Self::backward_for_clip) (what a
    /// training step runs) of `x` (`labels.len()` examples), returning each layer's wall time in
    /// both passes (the loss's own time is in neither; the outer-product blocks left to the clip
    /// are timed there, not here). Layers before the first with parameters run no backward pass (nothing needs
    /// their gradients): their `backward` is zero. For finding where a model's time goes
    /// (`dpgd bench-step --layers`, `cargo bench --bench layers`); the training step never
    /// times itself.
    ///
    /// # Examples
    /// ```
    /// use dpgd::arch::ModelSpec;
    /// use dpgd::per_example::Network;
    /// use rand::SeedableRng;
    ///
    /// let net = Network::new(&ModelSpec::logistic()).unwrap();
    /// let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    /// let mut ws = net.workspace(2);
    /// let x = vec![0.5f32; 2 * net.input_len()];
    /// let (mut grads, mut losses) = (vec![0.0f32; 2 * net.num_params()], vec![0.0f32; 2]);
    /// let times = net.profile(&theta, &mut ws, &x, &[3, 7], &mut grads, &mut losses);
    /// assert_eq!(times.len(), net.layers().len());
    /// ```
    #[must_use]
    pub fn profile(
        &self,
        theta: &[f32],
        ws: &mut Workspace,
        x: &[f32],
        labels: &[u8],
        grads: &mut [f32],
        losses: &mut [f32],
    ) -> Vec<LayerTimes> {
        let mut times = vec![LayerTimes::default(); self.layers().len()];
        let mut norms = vec![0.0; labels.len()];
        self.forward_timed(theta, ws, x, labels.len(), Some(&mut times));
        self.backward_timed(theta, ws, labels, grads, losses, Some(&mut norms), true, Some(&mut times));
        times
    }

    /// [`backward`](Self::backward), with the rows' squared norms into `norms` and each
    /// layer's time added to `times[l].backward` when given; with `factored` (and norms), the
    /// outer-product blocks left to the clip ([`backward_for_clip`](Self::backward_for_clip)).
    #[allow(clippy::too_many_arguments)]
    fn backward_timed(
        &self,
        theta: &[f32],
        ws: &mut Workspace,
        labels: &[u8],
        grads: &mut [f32],
        losses: &mut [f32],
        mut norms: Option<&mut [f64]>,
        factored: bool,
        mut times: Option<&mut [LayerTimes]>,
    ) {
        let b = labels.len();
        let p = self.num_params();
        // Internal: as in `forward`, every size comes from this network.
        assert!(b <= ws.batch && grads.len() >= b * p && losses.len() >= b);
        assert!(norms.as_ref().is_none_or(|n| n.len() >= b));
        if let Some(norms) = norms.as_deref_mut() {
            norms[..b].fill(0.0);
        }
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
        ws.joined.iter_mut().for_each(|j| j.fill(0.0));
        for (l, layer) in self.layers().iter().enumerate().rev() {
            let n_in = ws.acts[l].len() / ws.batch;
            let n_out = layer.out_len();
            let start = times.is_some().then(Instant::now);
            // Residual connections: a joined output's gradient also comes back through the
            // join; a joining layer's output gradient goes to the earlier layer as well.
            if self.is_joined(l) {
                add_into(&mut d_out[..b * n_out], &ws.joined[l][..b * n_out]);
            }
            if let Some(j) = self.joins()[l] {
                add_into(&mut ws.joined[j][..b * n_out], &d_out[..b * n_out]);
            }
            let fused = norms.is_some() && layer.adds_norms();
            layer.backward(Backward {
                theta,
                input: &ws.acts[l],
                output: &ws.acts[l + 1],
                dy: &d_out[..b * n_out],
                dx: (l > first).then(|| &mut d_in[..b * n_in]),
                grads,
                p,
                b,
                own: &mut ws.own[l],
                shared: &mut ws.shared,
                norms: if fused { norms.as_deref_mut() } else { None },
                factored: factored && fused && layer.outer().is_some(),
            });
            if let (Some(norms), true, false) = (norms.as_deref_mut(), layer.params().is_some(), fused) {
                for (n, row) in norms[..b].iter_mut().zip(grads.chunks_exact(p)) {
                    *n += layer.squared_norm(row);
                }
            }
            if let (Some(t), Some(start)) = (times.as_deref_mut(), start) {
                t[l].backward += start.elapsed();
            }
            if l == first {
                break;
            }
            std::mem::swap(&mut d_out, &mut d_in);
        }
        ws.grad_a = d_out;
        ws.grad_b = d_in;
    }
}

/// `y += x`, element by element.
fn add_into(y: &mut [f32], x: &[f32]) {
    for (a, &b) in y.iter_mut().zip(x) {
        *a += b;
    }
}
