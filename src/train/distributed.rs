//! Data-parallel training ([`crate::collective`]): what rank 0 sends, how the ranks' partial
//! sums are combined, and the loop of every rank but 0.
//!
//! **The protocol.** Per step rank 0 sends [`Message::Step`] (the step, θ, and a DP-SGD step's
//! Poisson sample); every rank charges and clips its shard of the examples, makes its ledger
//! shard durable ([`super::shards`]) and adds its integer partial sum into rank 0's
//! ([`combine`]). Rank 0 alone adds the noise, updates θ, draws the step's releases (asking
//! the ranks for their shards' correct predictions with [`Message::Count`] when the stopping
//! rule's noisy training accuracy is due), writes its state and only then shows anything. At
//! the end it sends [`Message::End`]. Un-noised values — partial sums, exact counts of correct
//! predictions, θ — travel only between the run's ranks, inside the operator's cluster, as
//! confidential as `state.bin`: an MPI reduction may pass partial sums through intermediate
//! ranks on its way to rank 0 (its tree algorithms do), so every rank sees some of them. Only
//! rank 0 adds noise, and only noised values leave the cluster.
//!
//! **Bit-identical to one process.** Each example's clipped row is rounded onto the run's grid
//! (chosen from the whole run's n and C, on every rank alike) and summed as integers: the total
//! does not depend on which rank summed what. The sample of a DP-SGD step is drawn once, by rank
//! 0, exactly as one process draws it, and sent.

use std::ops::Range;

use super::ValidConfig;
use super::folder::RunFolder;
use super::step::{ClippedSum, GradientPlan, SumStats};
use crate::accounting::filter::IndividualFilter;
use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::per_example::PerExample;

/// What rank 0 tells the other ranks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Message {
    /// Compute step `step` at θ: charge, clip and sum the shard's examples (those of `sample`,
    /// one flag per example of the whole run, for a DP-SGD step).
    Step { step: usize, theta: Vec<f32>, sample: Option<Vec<bool>> },
    /// Count the shard's examples the model θ classifies correctly.
    Count { theta: Vec<f32> },
    /// This invocation is over: leave. `finished`: the run is over (else it stopped on
    /// `stop_after`, to be resumed).
    End { finished: bool },
}

impl Message {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let word = |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&(v as u64).to_le_bytes());
        let floats = |out: &mut Vec<u8>, t: &[f32]| {
            word(out, t.len());
            t.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        };
        match self {
            Message::Step { step, theta, sample } => {
                out.push(1);
                word(&mut out, *step);
                floats(&mut out, theta);
                let flags = sample.as_deref().unwrap_or(&[]);
                out.push(u8::from(sample.is_some()));
                word(&mut out, flags.len());
                for byte in flags.chunks(8) {
                    out.push(byte.iter().enumerate().fold(0u8, |b, (k, &f)| b | (u8::from(f) << k)));
                }
            }
            Message::Count { theta } => {
                out.push(2);
                floats(&mut out, theta);
            }
            Message::End { finished } => out.extend_from_slice(&[3, u8::from(*finished)]),
        }
        out
    }

    /// The message in `bytes`, for a run of `params` parameters and `n` examples.
    pub(crate) fn decode(bytes: &[u8], params: usize, n: usize) -> Result<Self> {
        let bad = || Error::Collective(format!("rank 0 sent a message this rank cannot read ({} bytes)", bytes.len()));
        let mut at = 1usize;
        match bytes.first() {
            Some(1) => {
                let step = read_word(bytes, &mut at).ok_or_else(bad)?;
                let theta = read_floats(bytes, &mut at, params).ok_or_else(bad)?;
                let has = *bytes.get(at).ok_or_else(bad)? == 1;
                at += 1;
                let len = read_word(bytes, &mut at).ok_or_else(bad)?;
                if len != if has { n } else { 0 } {
                    return Err(bad());
                }
                let packed = bytes.get(at..at.saturating_add(len.div_ceil(8))).ok_or_else(bad)?;
                let flags: Vec<bool> = (0..len).map(|i| packed[i / 8] >> (i % 8) & 1 == 1).collect();
                Ok(Message::Step { step, theta, sample: has.then_some(flags) })
            }
            Some(2) => Ok(Message::Count { theta: read_floats(bytes, &mut at, params).ok_or_else(bad)? }),
            Some(3) => Ok(Message::End { finished: bytes.get(1) == Some(&1) }),
            _ => Err(bad()),
        }
    }
}

fn read_word(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let b: [u8; 8] = bytes.get(*at..at.checked_add(8)?)?.try_into().ok()?;
    *at += 8;
    usize::try_from(u64::from_le_bytes(b)).ok()
}

fn read_floats(bytes: &[u8], at: &mut usize, params: usize) -> Option<Vec<f32>> {
    if read_word(bytes, at)? != params {
        return None;
    }
    let b = bytes.get(*at..at.checked_add(params.checked_mul(4)?)?)?;
    *at += params * 4;
    Some(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Adds every rank's partial results into rank 0's: the clipped sum (integers, exact; a
/// non-private run's floats in f64), the statistics and the number of examples still active.
/// On the other ranks the returned values are their own.
///
/// # Errors
/// Another rank failed.
pub(crate) fn combine(
    comm: &mut dyn Collective,
    sum: ClippedSum,
    stats: SumStats,
    active: usize,
) -> Result<(ClippedSum, SumStats, usize)> {
    if comm.size() == 1 {
        return Ok((sum, stats, active));
    }
    let counts = [stats.computed, stats.skipped_nonfinite, active].map(|c| c as i64);
    let mut floats = vec![stats.loss_sum];
    let sum = match sum {
        ClippedSum::Grid { mut values, gamma } => {
            values.extend_from_slice(&counts);
            comm.sum_to_root(&mut values)?;
            let tail = values.split_off(values.len() - 3);
            comm.sum_to_root_f64(&mut floats)?;
            return Ok((ClippedSum::Grid { values, gamma }, stats_of(&tail, floats[0]), tail[2] as usize));
        }
        ClippedSum::Float(v) => v,
    };
    let mut ints = counts.to_vec();
    comm.sum_to_root(&mut ints)?;
    floats.extend(sum.iter().map(|&v| f64::from(v)));
    comm.sum_to_root_f64(&mut floats)?;
    let total = floats[1..].iter().map(|&v| v as f32).collect();
    Ok((ClippedSum::Float(total), stats_of(&ints, floats[0]), ints[2] as usize))
}

fn stats_of(counts: &[i64], loss_sum: f64) -> SumStats {
    SumStats { computed: counts[0] as usize, skipped_nonfinite: counts[1] as usize, loss_sum }
}

/// One rank's part of a step: its shard's examples (`shard` of the whole run's `n`, the
/// plan's data) charged, clipped and summed at θ; for a DP-SGD step, those of its part of the
/// whole run's `sample`. The ledger is charged here.
///
/// # Errors
/// As [`GradientPlan::gradient_sum_of`]; a sample that is not one flag per example of the run.
pub(crate) fn shard_sum<E: PerExample>(
    cfg: &ValidConfig,
    (plan, ledger): (&GradientPlan<'_, E>, &mut IndividualFilter),
    pool: &rayon::ThreadPool,
    (theta, step): (&[f32], usize),
    sample: Option<&[bool]>,
    shard: &Range<usize>,
) -> Result<(ClippedSum, SumStats)> {
    let part = match sample {
        Some(m) => Some(m.get(shard.clone()).ok_or_else(|| {
            Error::State(format!("a sample of {} flags for examples {}..{}", m.len(), shard.start, shard.end))
        })?),
        None => None,
    };
    let selection = match cfg.accounting() {
        Some(a) => a.selection(part),
        None => super::step::Selection::All,
    };
    pool.install(|| plan.gradient_sum_of(theta, ledger, step, selection))
}

/// What a rank other than 0 computed: its steps, the last θ it was sent, and whether rank 0
/// ended the run (or only stopped this invocation).
pub(crate) struct Served {
    pub(crate) steps: usize,
    pub(crate) theta: Vec<f32>,
    pub(crate) finished: bool,
}

/// The part of a run that every rank but 0 plays: wait for rank 0's messages and answer them,
/// until [`Message::End`].
///
/// # Errors
/// Any rank failed; this rank's gradients, ledger or files failed (it aborts the run first).
pub(crate) fn serve<E: PerExample>(
    cfg: &ValidConfig,
    part: (&GradientPlan<'_, E>, &mut IndividualFilter),
    (folder, shard): (&RunFolder, &super::shards::Shard),
    (pool, n): (&rayon::ThreadPool, usize),
    comm: &mut dyn Collective,
    theta0: Vec<f32>,
) -> Result<Served> {
    let (plan, ledger) = part;
    let params = plan.net().num_params();
    let mut served = Served { steps: 0, theta: theta0, finished: false };
    loop {
        let mut bytes = Vec::new();
        comm.broadcast(&mut bytes)?;
        let answered = match Message::decode(&bytes, params, n)? {
            Message::End { finished } => return Ok(Served { finished, ..served }),
            Message::Step { step, theta, sample } => (|| {
                let before = ledger.spent_all().to_vec();
                let (sum, stats) =
                    shard_sum(cfg, (plan, &mut *ledger), pool, (&theta, step), sample.as_deref(), &shard.range)?;
                super::shards::write(folder, shard, step, ledger.budget(), (&before, ledger.spent_all()))?;
                served.steps += 1;
                served.theta = theta;
                Ok((sum, stats, ledger.active_count_non_private()))
            })()
            .and_then(|(sum, stats, active)| combine(comm, sum, stats, active).map(|_| ())),
            Message::Count { theta } => {
                let mut correct = [pool
                    .install(|| crate::per_example::count_correct(plan.net(), &theta, plan.data(), plan.norm()))
                    as i64];
                comm.sum_to_root(&mut correct)
            }
        };
        if let Err(e) = answered {
            if !matches!(e, Error::Collective(_)) {
                comm.abort(&e.to_string());
            }
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn message() -> impl Strategy<Value = Message> {
        let theta = proptest::collection::vec(-4.0f32..4.0, 3);
        prop_oneof![
            (0usize..1000, theta.clone(), proptest::option::of(proptest::collection::vec(any::<bool>(), 11)))
                .prop_map(|(step, theta, sample)| Message::Step { step, theta, sample }),
            theta.prop_map(|theta| Message::Count { theta }),
            any::<bool>().prop_map(|finished| Message::End { finished }),
        ]
    }

    proptest! {
        /// Every message reads back as sent, for a run of 3 parameters and 11 examples.
        #[test]
        fn messages_round_trip(m in message()) {
            prop_assert_eq!(Message::decode(&m.encode(), 3, 11).unwrap(), m);
        }

        /// A damaged or truncated message is an error or a message of the run's shape, never a
        /// panic or an allocation beyond the bytes.
        #[test]
        fn damaged_messages_never_panic(m in message(), flips in proptest::collection::vec((0usize..80, any::<u8>()), 1..6), cut in 0usize..80) {
            let mut bytes = m.encode();
            for (at, v) in flips {
                let i = at % bytes.len();
                bytes[i] = v;
            }
            bytes.truncate(cut.max(1).min(bytes.len()));
            match Message::decode(&bytes, 3, 11) {
                Ok(Message::Step { theta, sample, .. }) => {
                    prop_assert_eq!(theta.len(), 3);
                    prop_assert!(sample.is_none_or(|s| s.len() == 11));
                }
                Ok(Message::Count { theta }) => prop_assert_eq!(theta.len(), 3),
                Ok(Message::End { .. }) | Err(_) => {}
            }
        }
    }
}
