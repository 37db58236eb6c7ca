//! One step of private gradient descent with individual filtering (001 Algorithm 3):
//! per-example gradients of every active example, the clipping kernel with its ledger
//! charge, the clipped sum; then noise and the update.

use std::sync::{Mutex, OnceLock};

use rayon::prelude::*;

use crate::accounting::filter::{IndividualFilter, LedgerSlot};
use crate::clip::{NonFinitePolicy, axpy, clip_factor};
use crate::data::{Normalize, Split};
use crate::error::{Error, Result};
use crate::noise::add_gaussian;
use crate::per_example::{Network, Workspace};

/// How per-example gradients are combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Combine {
    /// Algorithm 3's clip to min(‖g‖, C, √remaining), charged to the ledger.
    Clip {
        /// C.
        clip: f64,
        /// Non-finite gradient policy.
        on_nonfinite: NonFinitePolicy,
    },
    /// Plain sum, no clipping. NOT PRIVATE.
    Sum,
}

/// Blocks of examples per step (fixed, for a deterministic reduction).
const BLOCKS: usize = 64;

/// Per-thread buffers for one micro-batch.
#[derive(Debug)]
struct Scratch {
    ws: Workspace,
    x: Vec<f32>,
    labels: Vec<u8>,
    index: Vec<usize>,
    grads: Vec<f32>,
    losses: Vec<f32>,
    acc: Vec<f32>,
    failed: Option<usize>,
}

impl Scratch {
    fn new(net: &Network, chunk: usize) -> Self {
        Self {
            ws: net.workspace(chunk),
            x: vec![0.0; chunk * net.input_len()],
            labels: Vec::with_capacity(chunk),
            index: Vec::with_capacity(chunk),
            grads: vec![0.0; chunk * net.num_params()],
            losses: vec![0.0; chunk],
            acc: vec![0.0; net.num_params()],
            failed: None,
        }
    }
}

/// What one step computes over: the model, the training data and how gradients combine;
/// plus one set of scratch buffers per worker thread, reused across steps.
#[derive(Debug)]
pub struct GradientPlan<'a> {
    /// The compiled model.
    pub net: &'a Network,
    /// The training split.
    pub data: &'a Split,
    /// Pixel normalisation.
    pub norm: Normalize,
    /// Clip (private) or plain sum (non-private).
    pub combine: Combine,
    /// Examples per micro-batch.
    pub chunk: usize,
    scratch: OnceLock<Vec<Mutex<Scratch>>>,
}

impl<'a> GradientPlan<'a> {
    /// A plan; its scratch buffers are allocated on first use, one per worker thread.
    #[must_use]
    pub fn new(net: &'a Network, data: &'a Split, norm: Normalize, combine: Combine, chunk: usize) -> Self {
        Self { net, data, norm, combine, chunk, scratch: OnceLock::new() }
    }

    /// Σᵢ ḡ(xᵢ) over the training split at θ: per-example gradients in micro-batches of
    /// `chunk` examples (parallel over micro-batches on the current rayon pool), combined per
    /// `combine`. Examples whose budget is spent are skipped (they would contribute zero). The
    /// ledger is charged here, before anything is released.
    ///
    /// Returns the sum, or [`Error::NonFiniteGradient`] naming the first bad example (nothing
    /// is released then; charges already made stay made, which only overstates privacy spent).
    pub fn gradient_sum(&self, theta: &[f32], ledger: &mut IndividualFilter, step: usize) -> Result<Vec<f32>> {
        let n = self.data.len();
        assert_eq!(ledger.len(), n, "one ledger entry per training example");
        // Fixed blocks summed in a fixed order: the result does not depend on how rayon
        // schedules them, so a fixed noise seed reproduces a run bit for bit.
        let block = n.div_ceil(BLOCKS).div_ceil(self.chunk).max(1) * self.chunk;
        let threads = rayon::current_num_threads();
        let scratch =
            self.scratch.get_or_init(|| (0..threads).map(|_| Mutex::new(Scratch::new(self.net, self.chunk))).collect());
        let partials: Vec<(Vec<f32>, Option<usize>)> = ledger
            .slots_mut(0..n)
            .chunks(block)
            .enumerate()
            .map(|(bi, mut slots)| {
                let worker = rayon::current_thread_index().unwrap_or(0) % scratch.len();
                let mut guard = scratch[worker].lock().expect("scratch lock");
                let s = &mut *guard;
                s.acc.iter_mut().for_each(|v| *v = 0.0);
                s.failed = None;
                for (mb, mb_slots) in slots.chunks_mut(self.chunk).enumerate() {
                    self.micro_batch(theta, bi * block + mb * self.chunk, mb_slots, s);
                    if s.failed.is_some() {
                        break;
                    }
                }
                (s.acc.clone(), s.failed)
            })
            .collect();
        let mut sum = vec![0.0f32; self.net.num_params()];
        for (acc, failed) in partials {
            if let Some(example) = failed {
                return Err(Error::NonFiniteGradient { example, step });
            }
            axpy(1.0, &acc, &mut sum);
        }
        Ok(sum)
    }

    fn micro_batch(&self, theta: &[f32], start: usize, slots: &mut [LedgerSlot<'_>], s: &mut Scratch) {
        let (net, data) = (self.net, self.data);
        let (px, p) = (net.input_len(), net.num_params());
        s.labels.clear();
        s.index.clear();
        for (k, slot) in slots.iter().enumerate() {
            if matches!(self.combine, Combine::Sum) || slot.remaining() > 0.0 {
                s.index.push(k);
            }
        }
        let b = s.index.len();
        if b == 0 {
            return;
        }
        for (j, &k) in s.index.iter().enumerate() {
            let i = start + k;
            data.normalised_into(i..i + 1, self.norm, &mut s.x[j * px..(j + 1) * px]);
            s.labels.push(data.labels[i]);
        }
        net.forward(theta, &mut s.ws, &s.x[..b * px], b);
        net.backward(theta, &mut s.ws, &s.labels, &mut s.grads[..b * p], &mut s.losses);
        // Each row is clipped and added right after its norm, while it is still in cache.
        for (j, &k) in s.index.iter().enumerate() {
            let row = &s.grads[j * p..(j + 1) * p];
            let factor = match self.combine {
                Combine::Sum => 1.0,
                Combine::Clip { clip, on_nonfinite } => match clip_factor(row, &mut slots[k], clip, on_nonfinite) {
                    Ok((f, _)) => f,
                    Err(_) => {
                        s.failed = Some(start + k);
                        return;
                    }
                },
            };
            axpy(f64::from(factor), row, &mut s.acc);
        }
    }
}

/// θ ← θ − η (sum + N(0, σ²C²I)) / n, with `noise_std` = σC (0 for non-private runs).
pub fn apply_update(
    theta: &mut [f32],
    mut sum: Vec<f32>,
    noise_std: f64,
    lr: f64,
    n: usize,
    rng: &mut rand_chacha::ChaCha20Rng,
) {
    if noise_std > 0.0 {
        add_gaussian(&mut sum, noise_std, rng);
    }
    axpy(-lr / n as f64, &sum, theta);
}

/// Number of correctly classified examples of `data` under θ (parallel forward passes).
#[must_use]
pub fn correct(net: &Network, theta: &[f32], data: &Split, norm: Normalize) -> usize {
    const B: usize = 256;
    let (px, classes) = (net.input_len(), net.classes());
    (0..data.len().div_ceil(B))
        .into_par_iter()
        .map_init(
            || (net.workspace(B), vec![0.0f32; B * px]),
            |(ws, x), mb| {
                let (lo, hi) = (mb * B, ((mb + 1) * B).min(data.len()));
                data.normalised_into(lo..hi, norm, &mut x[..(hi - lo) * px]);
                let logits = net.forward(theta, ws, &x[..(hi - lo) * px], hi - lo);
                logits
                    .chunks_exact(classes)
                    .zip(&data.labels[lo..hi])
                    .filter(|(z, y)| argmax(z) == usize::from(**y))
                    .count()
            },
        )
        .sum()
}

fn argmax(z: &[f32]) -> usize {
    z.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0
}
