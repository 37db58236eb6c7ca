//! Ranks as threads of one process: the collective operations as rendezvous on shared memory.
//! For tests (a data-parallel run on 1–N simulated ranks, with faults injected) and for trying
//! a data-parallel setup without MPI.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::Collective;
use crate::error::{Error, Result};

/// One rank of a group of threads ([`InProcess::group`]): give each its own thread.
///
/// Dropping a rank (its thread returned, or panicked) leaves the group: a rank still waiting
/// on it, or calling afterwards, gets an error naming it instead of waiting for ever.
#[derive(Debug)]
pub struct InProcess {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    round: Mutex<Round>,
    done: Condvar,
}

/// The contributions of the operation in progress, and the result of the last one completed
/// (which no rank can overwrite before every rank has read it: the next operation completes
/// only when all have joined it).
#[derive(Debug, Default)]
struct Round {
    completed: u64,
    arrived: Vec<Option<Part>>,
    result: Part,
    failed: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Bytes(Option<Vec<u8>>),
}

impl Default for Part {
    fn default() -> Self {
        Part::Bytes(None)
    }
}

impl InProcess {
    /// A group of `size ≥ 1` ranks, rank r at index r.
    #[must_use]
    pub fn group(size: usize) -> Vec<InProcess> {
        let size = size.max(1);
        let shared = Arc::new(Shared::default());
        shared.lock().arrived = vec![None; size];
        (0..size).map(|rank| InProcess { rank, size, shared: shared.clone() }).collect()
    }

    /// Joins the current operation with `part`; returns the combined result once every rank
    /// has joined.
    fn join(&self, part: Part) -> Result<Part> {
        let mut round = self.shared.lock();
        if let Some(why) = &round.failed {
            return Err(Error::Collective(why.clone()));
        }
        if round.arrived[self.rank].is_some() {
            return Err(Error::Collective(format!("rank {} joined one operation twice", self.rank)));
        }
        round.arrived[self.rank] = Some(part);
        let target = round.completed + 1;
        if round.arrived.iter().all(Option::is_some) {
            let parts: Vec<Part> = round.arrived.iter_mut().filter_map(Option::take).collect();
            match combine(parts) {
                Ok(result) => {
                    round.result = result;
                    round.completed = target;
                }
                Err(why) => round.failed = Some(why),
            }
            self.shared.done.notify_all();
        }
        while round.completed < target {
            if let Some(why) = &round.failed {
                return Err(Error::Collective(why.clone()));
            }
            round = self.shared.done.wait(round).unwrap_or_else(PoisonError::into_inner);
        }
        Ok(round.result.clone())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The parts of one operation, rank 0's first: sums in rank order, rank 0's bytes.
fn combine(mut parts: Vec<Part>) -> std::result::Result<Part, String> {
    let first = parts.remove(0);
    match first {
        Part::Ints(mut acc) => {
            for p in parts {
                match p {
                    Part::Ints(v) if v.len() == acc.len() => acc.iter_mut().zip(v).for_each(|(a, b)| *a += b),
                    other => return Err(mismatch(&Part::Ints(acc), &other)),
                }
            }
            Ok(Part::Ints(acc))
        }
        Part::Floats(mut acc) => {
            for p in parts {
                match p {
                    Part::Floats(v) if v.len() == acc.len() => acc.iter_mut().zip(v).for_each(|(a, b)| *a += b),
                    other => return Err(mismatch(&Part::Floats(acc), &other)),
                }
            }
            Ok(Part::Floats(acc))
        }
        Part::Bytes(root) => match parts.iter().find(|p| !matches!(p, Part::Bytes(None))) {
            Some(other) => Err(mismatch(&Part::Bytes(root), other)),
            None => Ok(Part::Bytes(root)),
        },
    }
}

fn mismatch(a: &Part, b: &Part) -> String {
    let name = |p: &Part| match p {
        Part::Ints(v) => format!("a sum of {} integers", v.len()),
        Part::Floats(v) => format!("a sum of {} floats", v.len()),
        Part::Bytes(_) => "a broadcast".to_string(),
    };
    format!("the ranks made different calls ({} and {}): a bug in the caller", name(a), name(b))
}

impl Collective for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn sum_to_root(&mut self, values: &mut [i64]) -> Result<()> {
        if let Part::Ints(total) = self.join(Part::Ints(values.to_vec()))?
            && self.rank == 0
        {
            values.copy_from_slice(&total);
        }
        Ok(())
    }
    fn sum_to_root_f64(&mut self, values: &mut [f64]) -> Result<()> {
        if let Part::Floats(total) = self.join(Part::Floats(values.to_vec()))?
            && self.rank == 0
        {
            values.copy_from_slice(&total);
        }
        Ok(())
    }
    fn broadcast(&mut self, bytes: &mut Vec<u8>) -> Result<()> {
        let mine = (self.rank == 0).then(|| std::mem::take(bytes));
        if let Part::Bytes(Some(root)) = self.join(Part::Bytes(mine))? {
            *bytes = root;
        }
        Ok(())
    }
    fn abort(&mut self, why: &str) {
        let mut round = self.shared.lock();
        round.failed.get_or_insert_with(|| format!("rank {} of {} stopped the run: {why}", self.rank, self.size));
        self.shared.done.notify_all();
    }
}

impl Drop for InProcess {
    /// Leaving the group fails every operation not completed yet: it cannot complete without
    /// this rank. (After a run's last operation, nobody calls again.)
    fn drop(&mut self) {
        let mut round = self.shared.lock();
        round.failed.get_or_insert_with(|| format!("rank {} of {} left the run", self.rank, self.size));
        self.shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_reach_rank_zero_and_broadcasts_every_rank() {
        let results: Vec<(Vec<i64>, Vec<u8>, Vec<f64>)> = std::thread::scope(|s| {
            let handles: Vec<_> = InProcess::group(4)
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        let r = c.rank() as i64;
                        let mut v = vec![r, 10 * r, -1];
                        c.sum_to_root(&mut v).unwrap();
                        let mut b = if r == 0 { vec![7, 8, 9] } else { vec![1] };
                        c.broadcast(&mut b).unwrap();
                        let mut f = vec![0.5 * r as f64];
                        c.sum_to_root_f64(&mut f).unwrap();
                        (v, b, f)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results[0].0, vec![6, 60, -4]);
        assert_eq!(results[2].0, vec![2, 20, -1], "the others keep their own");
        assert!(results.iter().all(|r| r.1 == vec![7, 8, 9]));
        assert_eq!(results[0].2, vec![3.0]);
    }

    /// A rank that aborts, or returns without joining, fails the others' pending call instead
    /// of leaving them waiting.
    #[test]
    fn a_failed_rank_is_named_and_nobody_waits() {
        for abort in [true, false] {
            let errors: Vec<String> = std::thread::scope(|s| {
                let handles: Vec<_> = InProcess::group(3)
                    .into_iter()
                    .map(|mut c| {
                        s.spawn(move || {
                            if c.rank() == 1 {
                                if abort {
                                    c.abort("out of memory");
                                }
                                return String::new();
                            }
                            c.sum_to_root(&mut [1]).unwrap_err().to_string()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let want = if abort { "rank 1 of 3 stopped the run: out of memory" } else { "rank 1 of 3 left the run" };
            assert_eq!([&errors[0], &errors[2]], [want, want]);
        }
    }

    #[test]
    fn different_calls_are_refused() {
        let errors: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = InProcess::group(2)
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        if c.rank() == 0 {
                            c.sum_to_root(&mut [1, 2]).is_err()
                        } else {
                            c.sum_to_root(&mut [1]).is_err()
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(errors, [true, true]);
    }
}
