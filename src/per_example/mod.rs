//! Per-example gradients behind one seam, [`PerExample`], with two engines:
//!
//! * the fast CPU engine, a [`Network`] of layers with exact per-example rules (one file each in
//!   [`layers`]: linear, conv2d via im2col + GEMM, ReLU, tanh, max-pool, flatten), evaluated on
//!   contiguous buffers, parallel over micro-batches of examples;
//! * the burn engine, [`BurnEngine`]: any burn model built from [`crate::nn`]'s layers, on a
//!   burn device chosen at run time, its per-example gradients read from one batched backward through probes.
//!
//! The trainer (ledger, clipping, exact sum, noise, releases, run folder) sees only the trait, so
//! both engines share every privacy mechanism. Both are tested against one-backward-per-example
//! gradients from burn's autodiff (`tests/per_example_vs_autodiff.rs`, `tests/burn_engine.rs`).

mod burn_engine;
mod device_rows;
mod engine;
pub mod independence;
pub mod layers;
mod loss;
mod network;
mod predict;

pub use burn_engine::{Backprop, BurnEngine, BurnScratch, GPU_CHUNK, GPU_THREADS, TrainableParam};
pub use device_rows::{DeviceRows, blocked_squares};
pub use engine::{LayerTimes, Workspace};
pub use independence::{Finding, Mixed, check_rows_are_own};
pub use layers::{Init, Layer, Params};
pub use network::{MAX_VALUES, Network, ShapeError};
pub use predict::count_correct;

use crate::clip::{KeptRows, Outer};

/// Where [`PerExample::gradients_with_norms`] left a micro-batch's rows.
pub enum Held<'s> {
    /// Written into `grads`, except the outer blocks given here by their factors; the norms
    /// are the rows' squared norms.
    Host(Vec<Outer<'s>>),
    /// Kept on the engine's device (`grads` is not written), for the clip to add there; the
    /// norms are upper bounds of the kept rows' squared norms ([`crate::clip::kept`]).
    Device(&'s mut dyn KeptRows),
}

impl<'s> Held<'s> {
    /// The outer blocks of rows written on the host; `None` for rows kept on a device.
    #[must_use]
    pub fn host(self) -> Option<Vec<Outer<'s>>> {
        match self {
            Held::Host(outer) => Some(outer),
            Held::Device(_) => None,
        }
    }
}

/// The micro-batch size (`train.chunk`) of an engine that names none: the burn engine's on the
/// CPU, 16. Once its convolutions and normalisations ran dpgd's kernels on flex, a micro-batch's
/// im2col matrices (7 MB for the residual GroupNorm model at 64) no longer fit in a core's L2
/// cache: on a 2-core AMD EPYC with AVX-512 the residual model's full private step over 60,000
/// examples took 2.24–2.46 s at 16 and 2.91–3.00 s at 32 (interleaved), 3.61–3.83 s at 64 (an
/// hour earlier, three rounds), and 8 was slower than 16 on 30,000 examples; the Opacus CNN's
/// took 1.84–2.92 s at 16 and 2.20–2.98 s at 32, no chunk clearly ahead through the noise
/// (`dpgd bench-step --engine burn --chunk C`). Before those kernels, 64 and 128 were fastest.
pub const DEFAULT_CHUNK: usize = 16;

/// The fast engine's micro-batch size: its full step on the Opacus CNN was fastest at 4
/// (`dpgd bench-step --chunk C`, 2 threads on this repository's 2-core machine, seconds per
/// 60,000 examples, with the linear layers' weights left to the clip: 0.656–0.661 at 4, 0.666 at
/// 5, 0.675–0.677 at 6, 0.687 at 8; before that, 0.88 at 2 and 0.82 at 3; 1.08 at 16 in an
/// earlier engine): a micro-batch's gradient rows, im2col matrices and activations then stay in
/// the core's L2 cache.
pub const FAST_ENGINE_CHUNK: usize = 4;

/// The per-example computation the trainer needs: per-example gradients of the cross-entropy
/// loss for a micro-batch, and logits. One implementation per engine.
///
/// **Contract** (what the privacy proof of the exact sum rests on): for a fixed batch size, the
/// gradient row an engine gives for example `i` (its written values and the factors of its
/// outer blocks) depends only on θ, `xᵢ` and `yᵢ` (and the engine's own randomness) — never on
/// the other examples of the batch. The trainer checks this clause on the engine's own path
/// before every run ([`check_rows_are_own`]). The trainer
/// always calls [`gradients_with_norms`](Self::gradients_with_norms) with exactly its configured
/// micro-batch size (zero-padding the last batch), so the rounding of a batched kernel cannot
/// depend on how many real examples share it. The squared norm an engine reports for a row is
/// what the example is charged: it must be the f64 sum of the squares of exactly that row's
/// values, an outer block's part possibly ‖δ‖²‖a‖² from its factors (the default
/// implementation computes it from the row; debug builds recheck every norm, release builds
/// trust it).
pub trait PerExample: Send + Sync {
    /// Buffers one worker thread reuses across micro-batches.
    type Scratch: Send;

    /// The number of trainable parameters P (the length of θ and of a gradient row).
    fn num_params(&self) -> usize;
    /// The micro-batch size this engine runs fastest at, for a run that sets no `train.chunk`.
    fn preferred_chunk(&self) -> usize {
        DEFAULT_CHUNK
    }
    /// The worker threads this engine runs fastest with, for a run that sets no
    /// `train.threads`; `None`: one per core.
    fn preferred_threads(&self) -> Option<usize> {
        None
    }
    /// The shape of one input example, `[channels, height, width]`.
    fn input_shape(&self) -> [usize; 3];
    /// Values per input example (`c·h·w`, channel-major).
    fn input_len(&self) -> usize {
        self.input_shape().iter().product()
    }
    /// Number of classes (logits per example).
    fn classes(&self) -> usize;
    /// Buffers for micro-batches of up to `batch` examples.
    fn scratch(&self, batch: usize) -> Self::Scratch;
    /// An upper estimate of the bytes [`scratch`](Self::scratch) and one call hold for `batch`
    /// examples, or `None` if it does not fit in a `u64` — checked before anything is allocated.
    fn scratch_bytes(&self, batch: usize) -> Option<u64>;
    /// Writes the per-example gradients of the `b = labels.len()` examples `x` (`b × input_len`)
    /// at θ into `grads` (`b × P`, row by row in θ's layout) and their losses into `losses[..b]`.
    fn gradients(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        scratch: &mut Self::Scratch,
        grads: &mut [f32],
        losses: &mut [f32],
    );
    /// [`gradients`](Self::gradients) for the clip, and each row's squared norm into
    /// `norms[..b]`: the f64 sum of the squares of exactly that row's P values, in any order
    /// (the clip charges it: `clip::clip_block_with_norms`). An engine may leave blocks of a row
    /// as outer products of two factors it keeps in `scratch` ([`Outer`]: coordinate (o, i) is
    /// the exact product δₒ·aᵢ; `grads` is then not written there), returned for the clip to
    /// multiply out as it adds them; their squared norms may come from the factors
    /// ([`crate::clip::outer_squared_norm`]). By default every value is written and the norms
    /// are computed from the rows afterwards; an engine may add them up while it writes the
    /// rows, when they are still in cache.
    #[allow(clippy::too_many_arguments)]
    fn gradients_with_norms<'s>(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        scratch: &'s mut Self::Scratch,
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Held<'s> {
        self.gradients(theta, x, labels, scratch, grads, losses);
        let p = self.num_params().max(1);
        for (n, row) in norms.iter_mut().zip(grads.chunks_exact(p)).take(labels.len()) {
            *n = crate::clip::squared_norm(row);
        }
        Held::Host(Vec::new())
    }
    /// Whether [`gradients_with_norms`](Self::gradients_with_norms) keeps the rows on the
    /// engine's device ([`Held::Device`]) and never writes `grads` (the trainer then allocates
    /// no host rows for it). False by default.
    fn keeps_rows(&self) -> bool {
        false
    }
    /// The logits (`b × classes`) of the `b` examples `x` at θ.
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, scratch: &'s mut Self::Scratch) -> &'s [f32];
    /// The part of the model holding the most parameters and how many, for advice when a model
    /// does not fit in memory.
    fn largest_part(&self) -> Option<(String, usize)>;
    /// Resets the engine's own randomness (a user model's dropout) to `seed`, so that two calls
    /// of one batch size after the same seed draw the same randomness at each position (for
    /// [`check_rows_are_own`]). Engines without randomness ignore it.
    fn reseed(&self, _seed: u64) {}
}

impl PerExample for Network {
    type Scratch = Workspace;

    fn num_params(&self) -> usize {
        Network::num_params(self)
    }
    fn preferred_chunk(&self) -> usize {
        FAST_ENGINE_CHUNK
    }
    fn input_shape(&self) -> [usize; 3] {
        self.spec().input
    }
    fn classes(&self) -> usize {
        Network::classes(self)
    }
    fn scratch(&self, batch: usize) -> Workspace {
        self.workspace(batch)
    }
    fn scratch_bytes(&self, batch: usize) -> Option<u64> {
        self.workspace_bytes(batch)
    }
    fn gradients(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        ws: &mut Workspace,
        grads: &mut [f32],
        losses: &mut [f32],
    ) {
        self.forward(theta, ws, x, labels.len());
        self.backward(theta, ws, labels, grads, losses);
    }
    fn gradients_with_norms<'s>(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        ws: &'s mut Workspace,
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Held<'s> {
        self.forward(theta, ws, x, labels.len());
        Held::Host(self.backward_for_clip(theta, ws, labels, grads, losses, norms))
    }
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, ws: &'s mut Workspace) -> &'s [f32] {
        self.forward(theta, ws, x, b)
    }
    fn largest_part(&self) -> Option<(String, usize)> {
        self.spec()
            .layers
            .iter()
            .zip(self.layers())
            .enumerate()
            .filter_map(|(i, (spec, l))| {
                l.params().map(|q| (format!("model.layers[{i}] ({spec:?})"), q.weight_len + q.bias_len))
            })
            .max_by_key(|&(_, n)| n)
    }
}
