//! The check that an engine's gradient rows are each example's own: the clause of the
//! [`PerExample`] contract that the exact sum's sensitivity rests on, checked on what the
//! engine actually computes — its own kernels, device and micro-batch size.
//!
//! **What it compares.** A micro-batch A of `batch` public pseudo-random examples (values in
//! [0, 1), random labels; a fixed key, no data), and for each bit of a position's index and each
//! value of that bit, a batch B that keeps A's examples at the positions with that bit value and
//! replaces every other one by a fresh example. Each kept position's row (as the clip reads it:
//! written values and the exact products of outer blocks) and its reported squared norm (what
//! it is charged) must be the same in A and in B. Any two positions differ in some bit, so for
//! every pair (i, j) some B keeps example i while replacing example j: a row that depends on
//! another example of its batch — a batch mean, a softmax over the batch axis, a batch flipped
//! around a layer, statistics only in training mode — changes and is refused. The engine's own
//! randomness (dropout) is reseeded before each batch, so a position draws the same randomness in
//! A and in every B. Then A rotated by one position must give each example the row it had in A
//! (a neighbour shifts the examples after it to other positions) — except on an engine that
//! draws randomness per position, recognised by A's rows changing with the seed, where this
//! holds in distribution (the draws are exchangeable) rather than row by row.
//!
//! **No tolerance, on every device.** The rows of one example in two batches of one size must be
//! bit-identical: any dependence on another example that changes a single bit is seen. The
//! sensitivity the ledger and σ account for is C, so an allowance here would be an unaccounted
//! one: a GPU check that let each of the b − 1 companions move a row by 2⁻¹⁶ of its largest
//! value would let one example move the sum by up to C·(1 + (b − 1)·√P·2⁻¹⁶), about 6·C for
//! the Opacus CNN at micro-batches of 2,048. So the check holds the device to the CPU's
//! standard: under one kernel set and one batch size its rows are functions of their own
//! example. Before comparing, one batch runs unchecked, so that a backend that chooses its
//! kernels on first use (burn's autotuning on a GPU) has chosen them; a backend whose kernels
//! still reorder a reduction between two identical calls is refused
//! ([`Finding::Unrepeatable`]) rather than allowed a margin.
//!
//! **What it cannot see.** It is a check on inputs, not a proof: a model written to mix its
//! examples only on other inputs, other batch sizes or later in training passes it. Checking
//! rows of the training data during training would make the run's behaviour depend on them, so
//! it is not done.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Held, PerExample};
use crate::clip::Rows;

/// Key of the check's examples (public: the check depends on the model alone).
const EXAMPLES_KEY: u64 = 0x6964_6570_656e_6465;
/// Seed the engine's own randomness is reset to before each batch of the check.
const RANDOMNESS_SEED: u64 = 0x7365_6564_6d69_7865;

/// What the check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// The row changed when the other examples of its batch changed.
    Companions,
    /// The row changed when the example moved to another position among the same examples.
    Position,
    /// The row changed between two identical calls after the same seed: the engine's
    /// randomness is not repeated by [`PerExample::reseed`], so rows cannot be compared.
    Unrepeatable,
}

/// Where a row was found not to be its example's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Mixed {
    /// What changed it.
    pub finding: Finding,
    /// The micro-batch size checked.
    pub batch: usize,
    /// The position (in the first batch) whose row changed.
    pub position: usize,
    /// The coordinate of θ where it changed (`None`: its squared norm changed).
    pub coordinate: Option<usize>,
    /// The value in the first batch, and in the other one.
    pub values: (f64, f64),
}

impl std::fmt::Display for Mixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.coordinate {
            Some(j) => format!("coordinate {j} of the gradient"),
            None => "the squared gradient norm".to_string(),
        };
        let why = match self.finding {
            Finding::Companions => "depending on the other examples",
            Finding::Position => "depending on its position in the batch",
            Finding::Unrepeatable => {
                "in two identical calls after the same seed (the engine's randomness is not repeated by reseeding, or \
                 its kernels reorder a sum between calls, so its rows cannot be compared: does another thread draw \
                 from the device's generator meanwhile? on a GPU, rows must be bit-identical across calls, as on the \
                 CPU)"
            }
        };
        write!(
            f,
            "in a micro-batch of {}, {what} of example {} is {} or {} {why}",
            self.batch, self.position, self.values.0, self.values.1
        )
    }
}

impl Mixed {
    /// What a user reads: the finding and where to look.
    #[must_use]
    pub fn explained(&self) -> String {
        match self.finding {
            Finding::Unrepeatable => format!(
                "the model's gradient rows cannot be checked: {self}. Build the engine and start the run where nothing \
                 else draws from the device's random generator"
            ),
            Finding::Companions | Finding::Position => format!(
                "the model mixes the examples of a batch: {self}. An example's gradient must depend on that example \
                 alone (clipping a row that carries others' data bounds nothing); look for a mean, sum, softmax or \
                 normalisation over the batch axis, a reordering of the batch around a dpgd layer, or behaviour that \
                 changes in training mode, and normalise within each example (dpgd::nn::GroupNorm or LayerNorm)"
            ),
        }
    }
}

/// One micro-batch of the check's examples and its rows, in the engine's buffers.
struct Batch<S> {
    scratch: S,
    x: Vec<f32>,
    labels: Vec<u8>,
    grads: Vec<f32>,
    losses: Vec<f32>,
    norms: Vec<f64>,
}

impl<S> Batch<S> {
    fn new<E: PerExample<Scratch = S>>(engine: &E, batch: usize) -> Self {
        Self {
            scratch: engine.scratch(batch),
            x: vec![0.0; batch * engine.input_len()],
            labels: vec![0; batch],
            grads: vec![0.0; batch * engine.num_params()],
            losses: vec![0.0; batch],
            norms: vec![0.0; batch],
        }
    }

    /// Sets example `i` to a fresh draw of `rng`.
    fn draw(&mut self, i: usize, classes: usize, rng: &mut ChaCha8Rng) {
        let n = self.x.len() / self.labels.len().max(1);
        self.x[i * n..(i + 1) * n].iter_mut().for_each(|v| *v = rng.random::<f32>());
        self.labels[i] = u8::try_from(rng.random_range(0..classes.max(1))).unwrap_or(0);
    }

    /// Sets example `to` to example `from` of the examples `(x, labels)`.
    fn copy(&mut self, to: usize, (x, labels): (&[f32], &[u8]), from: usize) {
        let n = self.x.len() / self.labels.len().max(1);
        self.x[to * n..(to + 1) * n].copy_from_slice(&x[from * n..(from + 1) * n]);
        self.labels[to] = labels[from];
    }

    /// The engine's rows of these examples, its randomness reseeded to `seed` first.
    fn rows<'s, E: PerExample<Scratch = S>>(
        &'s mut self,
        engine: &E,
        theta: &[f32],
        seed: u64,
    ) -> (Rows<'s>, &'s [f64]) {
        engine.reseed(seed);
        let p = engine.num_params();
        if engine.keeps_rows() {
            // The norms the clip would charge (bounds from the device), then the rows themselves,
            // which a kept call leaves on the device.
            let _ = engine.gradients_with_norms(
                theta,
                &self.x,
                &self.labels,
                &mut self.scratch,
                &mut [],
                &mut self.losses,
                &mut self.norms,
            );
            engine.reseed(seed);
            engine.gradients(theta, &self.x, &self.labels, &mut self.scratch, &mut self.grads, &mut self.losses);
            return (Rows::dense(&self.grads, p), &self.norms);
        }
        let outer = match engine.gradients_with_norms(
            theta,
            &self.x,
            &self.labels,
            &mut self.scratch,
            &mut self.grads,
            &mut self.losses,
            &mut self.norms,
        ) {
            Held::Host(outer) => outer,
            // Not reached: an engine that keeps rows says so (above).
            Held::Device(_) => Vec::new(),
        };
        (Rows::with_outer(&self.grads, p, outer), &self.norms)
    }
}

/// Row `i` of `a` against row `j` of `b` (rows and their norms), bit for bit: `None` if they
/// agree, else where they differ.
fn differ(a: (&Rows<'_>, &[f64], usize), b: (&Rows<'_>, &[f64], usize)) -> Option<(Option<usize>, (f64, f64))> {
    thread_local! {
        static ROWS: std::cell::RefCell<(Vec<f64>, Vec<f64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let ((rows_a, norms_a, i), (rows_b, norms_b, j)) = (a, b);
    let (na, nb) = (norms_a[i], norms_b[j]);
    if !same(na, nb) {
        return Some((None, (na, nb)));
    }
    ROWS.with_borrow_mut(|(x, y)| {
        x.resize(rows_a.p(), 0.0);
        y.resize(rows_b.p(), 0.0);
        rows_a.read_row(i, x);
        rows_b.read_row(j, y);
        (0..x.len()).find(|&k| !same(x[k], y[k])).map(|k| (Some(k), (x[k], y[k])))
    })
}

/// Checks that `engine`'s rows at θ for micro-batches of `batch` examples are each example's own
/// (see the [module docs](self)): `Ok` for `batch < 2`, where there is no other example.
///
/// # Errors
/// The first row found to change with its companions or its position, or to change between
/// two identical calls (randomness the engine cannot repeat).
pub fn check_rows_are_own<E: PerExample>(engine: &E, theta: &[f32], batch: usize) -> Result<(), Mixed> {
    if batch < 2 {
        return Ok(());
    }
    let classes = engine.classes();
    let mut rng = ChaCha8Rng::seed_from_u64(EXAMPLES_KEY);
    let (mut a, mut b) = (Batch::new(engine, batch), Batch::new(engine, batch));
    (0..batch).for_each(|i| a.draw(i, classes, &mut rng));
    let (x_a, labels_a) = (a.x.clone(), a.labels.clone());
    let examples_a = (x_a.as_slice(), labels_a.as_slice());
    (0..batch).for_each(|i| b.copy(i, examples_a, i));
    // One unchecked batch first: a backend that tunes its kernels on first use has chosen them.
    let _ = b.rows(engine, theta, RANDOMNESS_SEED);
    let (rows_a, norms_a) = a.rows(engine, theta, RANDOMNESS_SEED);
    let found = |finding, position, (coordinate, values)| Mixed { finding, batch, position, coordinate, values };
    // Two identical calls agree: what follows compares calls.
    let (rows_b, norms_b) = b.rows(engine, theta, RANDOMNESS_SEED);
    for i in 0..batch {
        if let Some(d) = differ((&rows_a, norms_a, i), (&rows_b, norms_b, i)) {
            return Err(found(Finding::Unrepeatable, i, d));
        }
    }
    // Companions: for each bit of the position, keep the examples with one value of it.
    for bit in 0..usize::BITS - (batch - 1).leading_zeros() {
        for kept in [0, 1] {
            let keeps = |i: usize| (i >> bit) & 1 == kept;
            (0..batch).filter(|&i| !keeps(i)).for_each(|i| b.draw(i, classes, &mut rng));
            let (rows_b, norms_b) = b.rows(engine, theta, RANDOMNESS_SEED);
            for i in (0..batch).filter(|&i| keeps(i)) {
                if let Some(d) = differ((&rows_a, norms_a, i), (&rows_b, norms_b, i)) {
                    return Err(found(Finding::Companions, i, d));
                }
            }
            (0..batch).for_each(|i| b.copy(i, examples_a, i));
        }
    }
    // Position: A rotated by one (example e at position e + 1).
    (0..batch).for_each(|e| b.copy((e + 1) % batch, examples_a, e));
    let (rows_b, norms_b) = b.rows(engine, theta, RANDOMNESS_SEED);
    let moved =
        (0..batch).find_map(|e| differ((&rows_a, norms_a, e), (&rows_b, norms_b, (e + 1) % batch)).map(|d| (e, d)));
    let Some((e, d)) = moved else { return Ok(()) };
    // An engine that draws randomness per position (dropout) gives other rows at another
    // position; there the clause holds in distribution. It shows as A changing with the seed.
    (0..batch).for_each(|i| b.copy(i, examples_a, i));
    let (rows_b, norms_b) = b.rows(engine, theta, RANDOMNESS_SEED ^ 1);
    let stochastic = (0..batch).any(|i| differ((&rows_a, norms_a, i), (&rows_b, norms_b, i)).is_some());
    if stochastic { Ok(()) } else { Err(found(Finding::Position, e, d)) }
}

/// Equal, NaN equal to NaN (a non-finite row is the example's own too).
fn same(x: f64, y: f64) -> bool {
    x == y || (x.is_nan() && y.is_nan())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ModelSpec;
    use crate::per_example::Network;

    /// The fast engine's rows are its examples' own, bit for bit, at every micro-batch size
    /// a run may use (on the kernels this processor selects).
    #[test]
    fn the_fast_engine_passes_at_several_batch_sizes() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(1));
        for batch in [1, 2, 3, 4, 7] {
            check_rows_are_own(&net, &theta, batch).unwrap();
        }
    }

    /// An engine that adds a tiny share of the next example's row to each row is refused, at
    /// the position and coordinate where it shows.
    #[test]
    fn a_row_that_leans_on_its_neighbour_is_refused() {
        struct Leaky(Network);
        impl PerExample for Leaky {
            type Scratch = crate::per_example::Workspace;
            fn num_params(&self) -> usize {
                self.0.num_params()
            }
            fn input_shape(&self) -> [usize; 3] {
                PerExample::input_shape(&self.0)
            }
            fn classes(&self) -> usize {
                self.0.classes()
            }
            fn scratch(&self, batch: usize) -> Self::Scratch {
                self.0.workspace(batch)
            }
            fn scratch_bytes(&self, batch: usize) -> Option<u64> {
                self.0.workspace_bytes(batch)
            }
            fn gradients(
                &self,
                theta: &[f32],
                x: &[f32],
                labels: &[u8],
                ws: &mut Self::Scratch,
                grads: &mut [f32],
                losses: &mut [f32],
            ) {
                self.0.gradients(theta, x, labels, ws, grads, losses);
                let (p, b) = (self.0.num_params(), labels.len());
                let next: Vec<f32> = grads[(1 % b) * p..(1 % b) * p + p].to_vec();
                grads[..p].iter_mut().zip(&next).for_each(|(g, n)| *g += 1e-6 * n);
            }
            fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, ws: &'s mut Self::Scratch) -> &'s [f32] {
                self.0.logits(theta, x, b, ws)
            }
            fn largest_part(&self) -> Option<(String, usize)> {
                None
            }
        }
        let net = Network::new(&ModelSpec::logistic()).unwrap();
        let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(1));
        let e = check_rows_are_own(&Leaky(net), &theta, 4).unwrap_err();
        assert_eq!((e.batch, e.position), (4, 0), "{e}");
        assert_eq!(e.finding, Finding::Companions);
        assert!(e.to_string().contains("of example 0 is") && e.explained().contains("mixes the examples"), "{e}");
    }
}
