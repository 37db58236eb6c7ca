//! The seam of data-parallel training: the few collective operations a run on several
//! processes needs, behind one trait ([`Collective`]), so that a step reads the same on 1 or N
//! processes.
//!
//! Rank 0 holds the run: its privacy session, its stopping rule, its noise and its folder's
//! state. Every rank holds one contiguous shard of the training examples ([`shard`]) and their
//! ledger entries. Per step, rank 0 sends θ (and a DP-SGD step's sample) to every rank
//! ([`Collective::broadcast`]); each rank charges and clips its shard's examples onto the run's
//! integer grid and makes its charges durable; the integer partial sums are added on rank 0
//! ([`Collective::sum_to_root`]), exactly and in any order, so the total is the one-process
//! total bit for bit whatever the number of ranks; rank 0 alone adds the noise, once.
//!
//! Implementations: [`Solo`] (one process: every operation is the identity), [`InProcess`]
//! (ranks as threads of one process, for tests and for checking a setup without MPI), and,
//! with the `mpi` feature, `Mpi` (rsmpi over the system's MPI library).

mod in_process;
#[cfg(feature = "mpi")]
mod mpi;

use std::ops::Range;

pub use in_process::InProcess;
#[cfg(feature = "mpi")]
pub use mpi::Mpi;

use crate::error::Result;

/// The collective operations of a data-parallel run. Every rank makes the same calls in the
/// same order; a call returns once every rank has made it (or one of them failed).
///
/// **Failure is loud**: a rank that cannot go on calls [`abort`](Self::abort) and returns its
/// error; every other rank's pending or next call then returns [`crate::Error::Collective`]
/// naming it ([`InProcess`]), or the launcher ends the job once the failed rank's `Mpi` is
/// dropped (after its caller has shown the error): no rank is left waiting.
pub trait Collective {
    /// This process's rank, in `0..size()`; rank 0 holds the run.
    fn rank(&self) -> usize;
    /// The number of processes in the run (at least 1).
    fn size(&self) -> usize;
    /// Adds `values` elementwise over the ranks into rank 0's `values`; the others' are left
    /// as they were. Every rank gives the same length. Integer addition is exact and
    /// associative, so the result does not depend on the order in which ranks are combined.
    ///
    /// # Errors
    /// Another rank failed, or lengths differ.
    fn sum_to_root(&mut self, values: &mut [i64]) -> Result<()>;
    /// As [`sum_to_root`](Self::sum_to_root) for floating-point values (confidential
    /// diagnostics and non-private runs only: the result may depend on the order of addition).
    ///
    /// # Errors
    /// As [`sum_to_root`](Self::sum_to_root).
    fn sum_to_root_f64(&mut self, values: &mut [f64]) -> Result<()>;
    /// Rank 0's `bytes` to every rank: on the others, `bytes` is replaced by rank 0's (its
    /// length included).
    ///
    /// # Errors
    /// Another rank failed.
    fn broadcast(&mut self, bytes: &mut Vec<u8>) -> Result<()>;
    /// Ends the run on every rank because this one cannot go on (`why`): at once, or, where the
    /// ending kills the processes (MPI), when this rank's collective is dropped, so that its
    /// caller can show the error first.
    fn abort(&mut self, why: &str);
}

impl<C: Collective + ?Sized> Collective for &mut C {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn sum_to_root(&mut self, values: &mut [i64]) -> Result<()> {
        (**self).sum_to_root(values)
    }
    fn sum_to_root_f64(&mut self, values: &mut [f64]) -> Result<()> {
        (**self).sum_to_root_f64(values)
    }
    fn broadcast(&mut self, bytes: &mut Vec<u8>) -> Result<()> {
        (**self).broadcast(bytes)
    }
    fn abort(&mut self, why: &str) {
        (**self).abort(why);
    }
}

/// This process's place in the run its launcher started: with the `mpi` feature, its MPI rank
/// (`Mpi::init`; a process started without a launcher is rank 0 of 1); without it, [`Solo`].
///
/// # Errors
/// As `Mpi::init`.
pub fn from_launcher() -> Result<Box<dyn Collective>> {
    #[cfg(feature = "mpi")]
    return Ok(Box::new(Mpi::init()?));
    #[cfg(not(feature = "mpi"))]
    Ok(Box::new(Solo))
}

/// One process: rank 0 of 1, every operation the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn sum_to_root(&mut self, _: &mut [i64]) -> Result<()> {
        Ok(())
    }
    fn sum_to_root_f64(&mut self, _: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn broadcast(&mut self, _: &mut Vec<u8>) -> Result<()> {
        Ok(())
    }
    fn abort(&mut self, _: &str) {}
}

/// The examples of rank `rank` of `size` among `n`: contiguous, in index order, sizes differing
/// by at most one (⌊n·r/size⌋ to ⌊n·(r+1)/size⌋). A function of (n, size, rank) alone, so a run
/// resumed on another number of ranks finds every example's old shard.
#[must_use]
pub fn shard(n: usize, size: usize, rank: usize) -> Range<usize> {
    let size = size.max(1) as u128;
    let at = |r: usize| (n as u128 * (r as u128).min(size) / size) as usize;
    at(rank)..at(rank + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_example_once_in_order() {
        for n in [0usize, 1, 2, 7, 600, 60_000] {
            for size in 1..=9 {
                let parts: Vec<Range<usize>> = (0..size).map(|r| shard(n, size, r)).collect();
                assert_eq!(parts[0].start, 0);
                assert_eq!(parts[size - 1].end, n);
                assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
                let lens: Vec<usize> = parts.iter().map(ExactSizeIterator::len).collect();
                assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1, "{n} on {size}: {lens:?}");
            }
        }
        assert_eq!(shard(usize::MAX, 3, 2).end, usize::MAX);
    }
}
