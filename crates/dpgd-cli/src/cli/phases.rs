//! `dpgd bench-step --phases`: where one micro-batch of the burn engine's private step spends
//! its time, phase by phase, on one thread, for an engine that keeps its rows on its device.
//! Each phase ends with a read back, so each is timed to its end on the device:
//!
//! - `prepare`: the host normalises the micro-batch's inputs;
//! - `forward`: the inputs up, the model's forward without recording (evaluation mode), the
//!   logits back;
//! - `rows_and_norms`: `gradients_with_norms` (inputs up, forward, backward, per-example rows,
//!   their blocked squares read back with the losses);
//! - `clip_sum`: `sum_rounded` (the factors up; scale, round and sum; P integers back).

use std::time::Instant;

use anyhow::{Result, bail};
use dpgd::data::{Examples, Normalize};
use dpgd::model::BurnModel;
use dpgd::per_example::{BurnEngine, Held, PerExample};
use serde_json::json;

/// Micro-batches run before the timed ones (compiling and tuning the kernels).
const WARMUP: usize = 3;

/// Times `reps` micro-batches of the first `chunk` examples of `train` and prints the medians
/// (ms) as one JSON line, with a summary on stderr.
pub(crate) fn run(engine: &BurnEngine<BurnModel>, train: Examples<'_>, chunk: usize, reps: usize) -> Result<()> {
    let b = chunk.min(train.len());
    if b == 0 || !engine.rows_on_device() {
        bail!("--phases needs at least one example and an engine that keeps its rows on its device (--engine burn)");
    }
    let theta = engine.current_params()?;
    let px = engine.input_len();
    let mut s = engine.scratch(b);
    let (mut x, mut losses, mut norms) = (vec![0.0f32; b * px], vec![0.0f32; b], vec![0.0f64; b]);
    let labels = train.labels()[..b].to_vec();
    let mut sum = vec![0i64; engine.num_params()];
    let live: Vec<(usize, f32)> = (0..b).map(|i| (i, 0.5)).collect();
    let mut times: [Vec<f64>; 4] = Default::default();
    for rep in 0..WARMUP + reps {
        let t0 = Instant::now();
        train.normalised_into(0..b, &Normalize::MNIST, &mut x);
        let t1 = Instant::now();
        let _ = engine.logits(&theta, &x, b, &mut s);
        let t2 = Instant::now();
        let held = engine.gradients_with_norms(&theta, &x, &labels, &mut s, &mut [], &mut losses, &mut norms);
        let t3 = Instant::now();
        let Held::Device(kept) = held else { bail!("the engine gave its rows to the host") };
        kept.sum_rounded(&live, &mut sum);
        let t4 = Instant::now();
        if rep >= WARMUP {
            for (v, (u, w)) in times.iter_mut().zip([(t0, t1), (t1, t2), (t2, t3), (t3, t4)]) {
                v.push(1e3 * w.duration_since(u).as_secs_f64());
            }
        }
    }
    let [prepare, forward, rows, clip] = times.map(|mut v| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    });
    eprintln!(
        "chunk {b}: prepare {prepare:.2} ms, forward {forward:.2} ms, rows and norms {rows:.2} ms, clip sum {clip:.2} ms \
         ({:.2} µs per example without the forward)",
        1e3 * (prepare + rows + clip) / b as f64
    );
    println!(
        "{}",
        json!({"bench": "phases", "device": dpgd::device::describe(engine.device()), "chunk": b, "reps": reps,
               "ms": {"prepare": prepare, "forward": forward, "rows_and_norms": rows, "clip_sum": clip}})
    );
    Ok(())
}
